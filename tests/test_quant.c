/* test_quant.c - sotto's weight formats: number codecs (hand-computed edge
 * cases), quantizers (round trips, error bounds, odd shapes, errors), the
 * reference vectors that bitsandbytes and compressed-tensors produced
 * (tests/data/quant_ref.txt, see tests/ref/gen_quant_ref.py), and the matmul
 * kernels of every format against the scalar reference and dense math. */
#include "check.h"
#include "half.h"
#include "linear.h"
#include "linear_ref.h"
#include "qmat.h"
#include "quant.h"
#include "sotto_err.h"
#include "threads.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static uint64_t g_rng = 0x9e3779b97f4a7c15ULL;

static float frand(void) { /* uniform in [-1, 1) */
    g_rng = g_rng * 6364136223846793005ULL + 1442695040888963407ULL;
    return (float)((g_rng >> 40) / 8388608.0 - 1.0);
}

static float grand(void) { /* standard normal */
    double u1 = (frand() + 1.0) * 0.5 + 1e-12, u2 = (frand() + 1.0) * 0.5;
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

static float bits_f(uint32_t u) { return sotto_f32_from_bits(u); }
static uint32_t f_bits(float f) { return sotto_bits_from_f32(f); }

/* ---- format table ------------------------------------------------------------------- */

static void test_format_table(void) {
    const char *names[] = {"f32", "bf16", "q8", "nf4", "nvfp4", "f16"};
    const int blocks[] = {1, 1, 32, 64, 16, 1};
    CHECK_EQ_INT(SOTTO_WFMT_COUNT, 6);
    for (int f = 0; f < SOTTO_WFMT_COUNT; f++) {
        CHECK_STR(sotto_wfmt_name((sotto_wfmt)f), names[f]);
        sotto_wfmt p = SOTTO_WFMT_COUNT;
        CHECK_EQ_INT(sotto_wfmt_parse(names[f], &p), 0);
        CHECK_EQ_INT(p, f);
        CHECK_EQ_INT(sotto_wfmt_block((sotto_wfmt)f), blocks[f]);
    }
    sotto_wfmt p;
    CHECK_EQ_INT(sotto_wfmt_parse("nf5", &p), SOTTO_E_INVALID);
    CHECK_EQ_INT(sotto_wfmt_parse("", &p), SOTTO_E_INVALID);
    CHECK_EQ_INT(sotto_wfmt_parse(NULL, &p), SOTTO_E_INVALID);
    CHECK_STR(sotto_wfmt_name(SOTTO_WFMT_COUNT), "?");
    /* 384 x 384 */
    CHECK_EQ_INT(sotto_wfmt_bytes(SOTTO_WFMT_F32, 384, 384), 384 * 384 * 4);
    CHECK_EQ_INT(sotto_wfmt_bytes(SOTTO_WFMT_BF16, 384, 384), 384 * 384 * 2);
    CHECK_EQ_INT(sotto_wfmt_bytes(SOTTO_WFMT_Q8, 384, 384), 384 * 384 + 384 * 12 * 4);
    CHECK_EQ_INT(sotto_wfmt_bytes(SOTTO_WFMT_NF4, 384, 384), 384 * 192 + 384 * 6 * 4);
    CHECK_EQ_INT(sotto_wfmt_bytes(SOTTO_WFMT_NVFP4, 384, 384), 384 * 192 + 384 * 24);
    CHECK_EQ_INT(sotto_wfmt_bytes(SOTTO_WFMT_F16, 384, 384), 384 * 384 * 2);
    CHECK_EQ_INT(sotto_wfmt_bytes(SOTTO_WFMT_BF16, 3, 7), 42);
    CHECK_EQ_INT(sotto_wfmt_bytes(SOTTO_WFMT_F16, 3, 7), 42);
    CHECK_EQ_INT(sotto_wfmt_bytes(SOTTO_WFMT_Q8, 2, 48), 0);    /* not a multiple of 32 */
    CHECK_EQ_INT(sotto_wfmt_bytes(SOTTO_WFMT_NF4, 2, 96), 0);   /* of 64 */
    CHECK_EQ_INT(sotto_wfmt_bytes(SOTTO_WFMT_NVFP4, 2, 40), 0); /* of 16 */
    CHECK_EQ_INT(sotto_wfmt_bytes(SOTTO_WFMT_NVFP4, 2, 48), 48 + 6);
    /* sotto_wmat_bytes with double quantization: 300 blocks */
    uint8_t codes[1];
    float nested[1];
    sotto_nf4_dq dq = {codes, nested, 0.0f};
    sotto_wmat w = {SOTTO_WFMT_NF4, 300, 64, NULL, NULL, &dq, 0.0f};
    CHECK_EQ_INT(sotto_wmat_bytes(&w), 300 * 32 + 300 + 2 * 4 + 4);
    w.nf4_dq = NULL;
    CHECK_EQ_INT(sotto_wmat_bytes(&w), 300 * 32 + 300 * 4);
}

/* ---- NF4 codec ----------------------------------------------------------------------- */

static void test_nf4_codec(void) {
    /* the table: bitsandbytes get_4bit_type("nf4") */
    CHECK(sotto_nf4_code[0] == -1.0f && sotto_nf4_code[7] == 0.0f && sotto_nf4_code[15] == 1.0f);
    CHECK(sotto_nf4_code[8] == 0.07958029955625534f && sotto_nf4_code[1] == -0.6961928009986877f);
    for (int i = 0; i < 15; i++) CHECK(sotto_nf4_code[i] < sotto_nf4_code[i + 1]);
    for (int i = 0; i < 16; i++) CHECK_EQ_INT(sotto_nf4_encode(sotto_nf4_code[i]), i);
    /* the thresholds of bitsandbytes' CUDA dQuantizeNF4, as its float
     * literals: exactly on one -> the lower code, one ulp above -> the upper */
    const float t[15] = {-0.8480964004993439f, -0.6106329262256622f, -0.4599952697753906f,
                         -0.33967943489551544f, -0.23460740596055984f, -0.13791173323988914f,
                         -0.045525018125772476f, 0.03979014977812767f, 0.1202552504837513f,
                         0.2035212516784668f, 0.2920137718319893f, 0.3893125355243683f,
                         0.5016634166240692f, 0.6427869200706482f, 0.8614784181118011f};
    int off_by_ulp = 0;
    for (int i = 0; i < 15; i++) {
        CHECK_EQ_INT(sotto_nf4_encode(t[i]), i);
        CHECK_EQ_INT(sotto_nf4_encode(nextafterf(t[i], 2.0f)), i + 1);
        CHECK_EQ_INT(sotto_nf4_encode(nextafterf(t[i], -2.0f)), i);
        /* the float32 midpoint (bitsandbytes' CPU threshold) is the same
         * float except for 4 thresholds, where it is one ulp away */
        float mid = (sotto_nf4_code[i] + sotto_nf4_code[i + 1]) / 2.0f;
        if (mid != t[i]) {
            off_by_ulp++;
            CHECK(mid == nextafterf(t[i], 2.0f) || mid == nextafterf(t[i], -2.0f));
            CHECK(i == 0 || i == 8 || i == 12 || i == 14);
        }
        CHECK_EQ_INT(sotto_nf4_encode(mid), mid > t[i] ? i + 1 : i);
    }
    CHECK_EQ_INT(off_by_ulp, 4);
    CHECK_EQ_INT(sotto_nf4_encode(1.5f), 15); /* beyond the range: clamp */
    CHECK_EQ_INT(sotto_nf4_encode(-1.5f), 0);
    CHECK_EQ_INT(sotto_nf4_encode(-0.0f), 7);
    CHECK_EQ_INT(sotto_nf4_encode(NAN), 0); /* as CUDA's comparisons do */
}

/* ---- E2M1 codec ---------------------------------------------------------------------- */

static void test_e2m1_codec(void) {
    const float mags[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
    for (int i = 0; i < 8; i++) {
        CHECK(sotto_e2m1_mag[i] == mags[i]);
        CHECK_EQ_INT(sotto_e2m1_encode(mags[i]), i);
        CHECK(sotto_e2m1_decode((uint8_t)i) == mags[i]);
        CHECK(sotto_e2m1_decode((uint8_t)(i | 8)) == -mags[i]);
        if (i) CHECK_EQ_INT(sotto_e2m1_encode(-mags[i]), i | 8);
        CHECK(sotto_e2m1_decode((uint8_t)(0xf0 | i)) == mags[i]); /* low 4 bits only */
    }
    CHECK(signbit(sotto_e2m1_decode(8)));
    /* midpoints between mags[lo] and mags[lo + 1]: ties to the even code */
    const struct {
        float x;
        int lo;
    } ties[] = {{0.25f, 0}, {0.75f, 1}, {1.25f, 2}, {1.75f, 3}, {2.5f, 4}, {3.5f, 5}, {5.0f, 6}};
    for (size_t i = 0; i < sizeof ties / sizeof ties[0]; i++) {
        int even = ties[i].lo & 1 ? ties[i].lo + 1 : ties[i].lo;
        CHECK_EQ_INT(sotto_e2m1_encode(ties[i].x), even);
        CHECK_EQ_INT(sotto_e2m1_encode(-ties[i].x), even | 8);
        CHECK_EQ_INT(sotto_e2m1_encode(nextafterf(ties[i].x, 0.0f)), ties[i].lo);
        CHECK_EQ_INT(sotto_e2m1_encode(nextafterf(ties[i].x, 9.0f)), ties[i].lo + 1);
    }
    CHECK_EQ_INT(sotto_e2m1_encode(nextafterf(0.25f, 1.0f)), 1);
    CHECK_EQ_INT(sotto_e2m1_encode(nextafterf(0.75f, 0.0f)), 1);
    CHECK_EQ_INT(sotto_e2m1_encode(nextafterf(5.0f, 9.0f)), 7);
    CHECK_EQ_INT(sotto_e2m1_encode(-0.0f), 0x8);
    CHECK_EQ_INT(sotto_e2m1_encode(-0.1f), 0x8); /* compressed-tensors keeps the sign */
    CHECK_EQ_INT(sotto_e2m1_encode(0.1f), 0x0);
    CHECK_EQ_INT(sotto_e2m1_encode(7.0f), 7); /* saturation */
    CHECK_EQ_INT(sotto_e2m1_encode(1e30f), 7);
    CHECK_EQ_INT(sotto_e2m1_encode(-INFINITY), 0xf);
    CHECK_EQ_INT(sotto_e2m1_encode(NAN), 0);
}

/* ---- E4M3 codec ---------------------------------------------------------------------- */

/* nearest finite E4M3 value by brute force, ties to the even code */
static uint8_t e4m3_brute(float x) {
    float a = fabsf(x);
    int best = 0;
    double bd = INFINITY;
    for (int c = 0; c < 0x7f; c++) {
        double d = fabs((double)a - (double)sotto_e4m3_decode((uint8_t)c));
        if (d < bd || (d == bd && (c & 1) == 0)) bd = d, best = c;
    }
    return (uint8_t)(best | (signbit(x) ? 0x80 : 0));
}

static void test_e4m3_codec(void) {
    CHECK_EQ_INT(sotto_e4m3_encode(0.0f), 0x00);
    CHECK_EQ_INT(sotto_e4m3_encode(-0.0f), 0x80);
    CHECK(sotto_e4m3_decode(0x00) == 0.0f && !signbit(sotto_e4m3_decode(0x00)));
    CHECK(sotto_e4m3_decode(0x80) == 0.0f && signbit(sotto_e4m3_decode(0x80)));
    CHECK_EQ_INT(sotto_e4m3_encode(0x1p-9f), 0x01); /* smallest subnormal */
    CHECK(sotto_e4m3_decode(0x01) == 0x1p-9f);
    CHECK_EQ_INT(sotto_e4m3_encode(0x1p-10f), 0x00);       /* tie 0 | 2^-9: even */
    CHECK_EQ_INT(sotto_e4m3_encode(0x1.000002p-10f), 0x01); /* just above the tie */
    CHECK_EQ_INT(sotto_e4m3_encode(0x1.8p-9f), 0x02);      /* tie 1 | 2: even */
    CHECK_EQ_INT(sotto_e4m3_encode(0x1.4p-8f), 0x02);      /* tie 2 | 3: even (2.5 * 2^-9) */
    CHECK_EQ_INT(sotto_e4m3_encode(7 * 0x1p-9f), 0x07);    /* largest subnormal */
    CHECK(sotto_e4m3_decode(0x07) == 7 * 0x1p-9f);
    CHECK_EQ_INT(sotto_e4m3_encode(7.5f * 0x1p-9f), 0x08); /* tie 7 | min normal: even */
    CHECK_EQ_INT(sotto_e4m3_encode(0x1p-6f), 0x08);        /* min normal */
    CHECK(sotto_e4m3_decode(0x08) == 0x1p-6f);
    CHECK_EQ_INT(sotto_e4m3_encode(1.0f), 0x38);
    CHECK_EQ_INT(sotto_e4m3_encode(1.0625f), 0x38); /* tie 1 | 1.125: even */
    CHECK_EQ_INT(sotto_e4m3_encode(1.1875f), 0x3a); /* tie 1.125 | 1.25: even */
    CHECK_EQ_INT(sotto_e4m3_encode(-1.1875f), 0xba);
    CHECK_EQ_INT(sotto_e4m3_encode(1.96875f), 0x40); /* tie 1.875 | 2: carries into the exponent */
    CHECK_EQ_INT(sotto_e4m3_encode(0.125f), 0x20);
    CHECK_EQ_INT(sotto_e4m3_encode(448.0f), 0x7e); /* max */
    CHECK(sotto_e4m3_decode(0x7e) == 448.0f);
    CHECK_EQ_INT(sotto_e4m3_encode(416.0f), 0x7d);
    CHECK_EQ_INT(sotto_e4m3_encode(432.0f), 0x7e); /* tie 416 | 448: even */
    CHECK_EQ_INT(sotto_e4m3_encode(460.0f), 0x7e); /* saturating */
    CHECK_EQ_INT(sotto_e4m3_encode(464.0f), 0x7e);
    CHECK_EQ_INT(sotto_e4m3_encode(1e20f), 0x7e);
    CHECK_EQ_INT(sotto_e4m3_encode(INFINITY), 0x7e);
    CHECK_EQ_INT(sotto_e4m3_encode(-INFINITY), 0xfe);
    CHECK_EQ_INT(sotto_e4m3_encode(-1000.0f), 0xfe);
    CHECK_EQ_INT(sotto_e4m3_encode(NAN) & 0x7f, 0x7f);
    CHECK(isnan(sotto_e4m3_decode(0x7f)) && isnan(sotto_e4m3_decode(0xff)));
    /* every finite code round-trips; values match the bit layout */
    int bad = 0;
    for (int c = 0; c < 256; c++) {
        if ((c & 0x7f) == 0x7f) continue;
        float v = sotto_e4m3_decode((uint8_t)c);
        int e = (c >> 3) & 15, m = c & 7;
        float want = e ? ldexpf(1.0f + m / 8.0f, e - 7) : ldexpf((float)m, -9);
        if (c & 0x80) want = -want;
        bad += v != want || sotto_e4m3_encode(v) != c;
    }
    CHECK_EQ_INT(bad, 0);
    /* random values against brute force (ties included through midpoints) */
    bad = 0;
    for (int i = 0; i < 20000; i++) {
        float x = ldexpf(frand(), (int)(frand() * 14.0f) - 4);
        if (fabsf(x) > 448.0f) continue;
        bad += sotto_e4m3_encode(x) != e4m3_brute(x);
    }
    for (int c = 0; c < 0x7e; c++) {
        float mid = (sotto_e4m3_decode((uint8_t)c) + sotto_e4m3_decode((uint8_t)(c + 1))) / 2.0f;
        bad += sotto_e4m3_encode(mid) != e4m3_brute(mid);
        bad += sotto_e4m3_encode(-mid) != e4m3_brute(-mid);
    }
    CHECK_EQ_INT(bad, 0);
}

/* ---- the 8-bit dynamic map and double quantization ------------------------------------- */

static void test_dyn8_map(void) {
    CHECK(sotto_dyn8_code[255] == 1.0f);
    CHECK(sotto_dyn8_code[0] == -0.99296875f); /* create_dynamic_map()[0], not -1 */
    int zeros = 0, sorted = 1;
    for (int i = 0; i < 256; i++) {
        zeros += sotto_dyn8_code[i] == 0.0f;
        if (i && sotto_dyn8_code[i] < sotto_dyn8_code[i - 1]) sorted = 0;
    }
    CHECK(sorted);
    CHECK_EQ_INT(zeros, 1);
    CHECK(sotto_dyn8_code[127] == 0.0f);
}

/* nearest map entry by brute force; -1 when x is (within 1 ulp of) a tie */
static int dyn8_brute(float x) {
    int best = 0;
    double bd = INFINITY, second = INFINITY;
    for (int i = 0; i < 256; i++) {
        double d = fabs((double)x - sotto_dyn8_code[i]);
        if (d < bd) second = bd, bd = d, best = i;
        else if (d < second) second = d;
    }
    return second - bd <= 4e-7 * fabs(x) + 1e-30 ? -1 : best;
}

static void test_double_quant(void) {
    /* n not a multiple of 256: 300 absmax values in two nested blocks */
    enum { N = 300 };
    float absmax[N], nested[2], offset;
    uint8_t codes[N];
    double sum = 0;
    for (int i = 0; i < N; i++) {
        absmax[i] = 0.05f + 0.04f * frand() + (i == 7 ? 0.5f : 0.0f);
        sum += absmax[i];
    }
    sotto_nf4_double_quant(absmax, N, codes, nested, &offset);
    CHECK(offset == (float)(sum / N));
    for (int b = 0; b < 2; b++) {
        float m = 0;
        for (int i = b * 256; i < N && i < b * 256 + 256; i++) m = fmaxf(m, fabsf(absmax[i] - offset));
        CHECK(nested[b] == m);
    }
    int bad = 0, ties = 0;
    double worst = 0;
    for (int i = 0; i < N; i++) {
        float x = (absmax[i] - offset) * (1.0f / nested[i / 256]);
        int want = dyn8_brute(x);
        if (want < 0) ties++;
        else bad += codes[i] != want;
        float back = sotto_dyn8_code[codes[i]] * nested[i / 256] + offset;
        double e = fabs(back - absmax[i]) / nested[i / 256];
        worst = e > worst ? e : worst;
    }
    CHECK_EQ_INT(bad, 0);
    CHECK(ties < 3);
    CHECK_MSG(worst <= 0.0071, "double-quant worst error %g of the nested absmax", worst);
    /* the value with absmax 1 (the block maximum) is exactly representable */
    CHECK(codes[7] == 255);
    /* all equal: nested absmax 0, every code decodes to the offset exactly */
    float same[5] = {0.25f, 0.25f, 0.25f, 0.25f, 0.25f};
    sotto_nf4_double_quant(same, 5, codes, nested, &offset);
    CHECK(offset == 0.25f && nested[0] == 0.0f);
    for (int i = 0; i < 5; i++) CHECK(sotto_dyn8_code[codes[i]] * nested[0] + offset == 0.25f);
}

/* ---- quantizers -------------------------------------------------------------------------- */

/* Matrices are tests/qmat.h's test_qmat: exact-size buffers, so a kernel that
 * reads past a matrix is reported under ASan. */

/* f16: halves are exact; rounding to nearest even; too large for a half is refused */
static void test_f16_roundtrip(void) {
    float src[2 * 32], back[2 * 32];
    for (int i = 0; i < 64; i++) src[i] = (float)(i - 20) * 0.375f;
    src[5] = 0x1p-24f;  /* the smallest subnormal half */
    src[6] = -65504.0f; /* the largest finite half */
    src[7] = 0x1.ff8p-15f; /* the largest subnormal half */
    test_qmat q;
    CHECK_EQ_INT(test_qmat_make(&q, SOTTO_WFMT_F16, 2, 32, src, 2, 0), 0);
    sotto_wmat_dequantize_rows(&q.w, 0, 2, back);
    CHECK(memcmp(src, back, sizeof src) == 0);
    CHECK(((uint16_t *)q.data)[6] == 0xfbffu && ((uint16_t *)q.data)[5] == 0x0001u);
    test_qmat_free(&q);
    /* 1 + 2^-11 is a tie -> 1; 1 + 3 * 2^-11 -> 1 + 2^-9; 65519 -> 65504 */
    float t[4] = {1.0f + 0x1p-11f, 1.0f + 3 * 0x1p-11f, 65519.0f, 0x1p-26f}, tb[4];
    CHECK_EQ_INT(test_qmat_make(&q, SOTTO_WFMT_F16, 1, 4, t, 1, 0), 0);
    sotto_wmat_dequantize_rows(&q.w, 0, 1, tb);
    CHECK(tb[0] == 1.0f && tb[1] == 1.0f + 0x1p-9f && tb[2] == 65504.0f && tb[3] == 0.0f);
    test_qmat_free(&q);
    /* 65520 rounds to infinity: refused, not stored as inf */
    uint16_t d[4];
    float big[4] = {1.0f, -65520.0f, 2.0f, 3.0f};
    sotto_wmat w = {SOTTO_WFMT_F16, 1, 4, d, NULL, NULL, 0.0f};
    CHECK_EQ_INT(sotto_quantize_rows(&w, d, NULL, big, 0, 1), SOTTO_E_RANGE);
}

/* f16 weights hold the values of an f16 checkpoint exactly, and sotto_linear
 * on them gives the same bits as on the same values in f32, in every regime
 * (the fused kernel up to 16 rows of x, sgemm above), with 1 and 2 threads:
 * a model loaded as f16 transcribes exactly as the f32 one. */
static void test_f16_equals_f32(void) {
    const int shapes[][2] = {{4, 64}, {37, 384}, {1536, 384}, {384, 1536}, {9, 80}};
    const int ns[] = {1, 2, 3, 4, 5, 8, 16, 17, 33, 40};
    for (int threads = 1; threads <= 2; threads++) {
        sotto_threads_set(threads);
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
            const int rows = shapes[s][0], cols = shapes[s][1];
            float *src = malloc(sizeof(float) * (size_t)rows * cols);
            for (size_t i = 0; i < (size_t)rows * cols; i++)
                src[i] = sotto_fp16_to_f32(sotto_f32_to_fp16(grand() * 0.05f)); /* half values */
            test_qmat h, f;
            CHECK_EQ_INT(test_qmat_make(&h, SOTTO_WFMT_F16, rows, cols, src, rows, 0), 0);
            CHECK_EQ_INT(test_qmat_make(&f, SOTTO_WFMT_F32, rows, cols, src, rows, 0), 0);
            CHECK(memcmp(f.data, src, sizeof(float) * (size_t)rows * cols) == 0);
            for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++) {
                const int n = ns[ni];
                float *x = malloc(sizeof(float) * (size_t)n * cols);
                float *yh = malloc(sizeof(float) * (size_t)n * rows), *yf = malloc(sizeof(float) * (size_t)n * rows);
                for (size_t i = 0; i < (size_t)n * cols; i++) x[i] = frand();
                for (int acc = 0; acc <= 1; acc++) {
                    for (size_t i = 0; i < (size_t)n * rows; i++) yh[i] = yf[i] = (float)i * 0.001f;
                    (acc ? sotto_linear_acc : sotto_linear)(&h.w, NULL, x, n, yh);
                    (acc ? sotto_linear_acc : sotto_linear)(&f.w, NULL, x, n, yf);
                    CHECK_MSG(memcmp(yh, yf, sizeof(float) * (size_t)n * rows) == 0,
                              "f16 vs f32 %dx%d n=%d%s, %d threads: not the same bits", rows, cols, n,
                              acc ? " (accumulate)" : "", threads);
                }
                free(x), free(yh), free(yf);
            }
            test_qmat_free(&h), test_qmat_free(&f);
            free(src);
        }
    }
    sotto_threads_set(0);
}

static void test_bf16_q8_roundtrip(void) {
    float src[2 * 32], back[2 * 32];
    for (int i = 0; i < 64; i++) src[i] = (float)(i - 20) * 0.375f; /* bf16-exact values */
    test_qmat q;
    CHECK_EQ_INT(test_qmat_make(&q, SOTTO_WFMT_BF16, 2, 32, src, 2, 0), 0);
    sotto_wmat_dequantize_rows(&q.w, 0, 2, back);
    CHECK(memcmp(src, back, sizeof src) == 0);
    CHECK(((uint16_t *)q.data)[0] == sotto_f32_to_bf16(src[0]));
    test_qmat_free(&q);
    /* bf16 rounds to nearest even: 1 + 2^-8 is a tie -> 1, 1 + 3 * 2^-8 -> 1 + 2^-6 */
    float t[3] = {1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f, -3.0f}, tb[3];
    CHECK_EQ_INT(test_qmat_make(&q, SOTTO_WFMT_BF16, 1, 3, t, 1, 0), 0);
    sotto_wmat_dequantize_rows(&q.w, 0, 1, tb);
    CHECK(tb[0] == 1.0f && tb[1] == 1.0f + 0x1p-6f && tb[2] == -3.0f);
    test_qmat_free(&q);

    /* Q8 by hand: absmax 127 -> scale 1, values round to nearest even */
    for (int i = 0; i < 32; i++) src[i] = (float)(i - 16) + 0.5f;
    src[0] = -127.0f;
    src[1] = 2.5f;  /* tie -> 2 */
    src[2] = 3.5f;  /* tie -> 4 */
    src[3] = -0.4f; /* -> 0 */
    for (int i = 32; i < 64; i++) src[i] = 0.0f; /* an all-zero block */
    CHECK_EQ_INT(test_qmat_make(&q, SOTTO_WFMT_Q8, 1, 64, src, 1, 0), 0);
    const int8_t *qq = q.data;
    const float *sc = q.scales;
    CHECK(sc[0] == 1.0f && sc[1] == 0.0f);
    CHECK(qq[0] == -127 && qq[1] == 2 && qq[2] == 4 && qq[3] == 0 && qq[4] == -12);
    sotto_wmat_dequantize_rows(&q.w, 0, 1, back);
    for (int i = 32; i < 64; i++) CHECK(back[i] == 0.0f && !signbit(back[i]));
    CHECK(back[0] == -127.0f && back[1] == 2.0f);
    test_qmat_free(&q);
}

static void test_nf4_by_hand(void) {
    /* one block, absmax 2: elements are 2 * code, in a known order */
    float src[128], back[128];
    for (int i = 0; i < 64; i++) src[i] = 2.0f * sotto_nf4_code[(i * 7 + 3) % 16];
    src[5] = 2.0f; /* make sure absmax is 2 */
    for (int i = 64; i < 128; i++) src[i] = 0.0f;
    test_qmat q;
    CHECK_EQ_INT(test_qmat_make(&q, SOTTO_WFMT_NF4, 1, 128, src, 1, 0), 0);
    const uint8_t *p = q.data;
    const float *am = q.scales;
    CHECK(am[0] == 2.0f && am[1] == 0.0f);
    /* element 0 -> code (3) in the HIGH nibble, element 1 -> code (10) low */
    CHECK_EQ_INT(p[0], (3 << 4) | 10);
    CHECK_EQ_INT(p[2], 0xff); /* element 4: code 15; element 5: 2.0 -> 15 */
    sotto_wmat_dequantize_rows(&q.w, 0, 1, back);
    CHECK(memcmp(src, back, 64 * sizeof(float)) == 0);
    for (int i = 64; i < 128; i++) CHECK(back[i] == 0.0f && !isnan(back[i]));
    CHECK_EQ_INT(p[32], 0x00); /* zero block: code 0, as bitsandbytes' CUDA kernel */
    test_qmat_free(&q);
}

static void test_nvfp4_by_hand(void) {
    /* tensor amax 6 * 448 -> global scale 1; block 0 amax 6 -> E4M3 scale 1 */
    float src[48], back[48];
    const float b0[16] = {6, 3, -1.5f, 0.5f, -0.0f, 0.25f, 0.75f, -5, 4, 2, 1, -6, 2.5f, 1.75f,
                          -0.1f, 0};
    memcpy(src, b0, sizeof b0);
    for (int i = 16; i < 32; i++) src[i] = 0.0f;                 /* zero block */
    for (int i = 32; i < 48; i++) src[i] = (i == 40) ? 2688.0f : 0.0f; /* amax block */
    test_qmat q;
    CHECK_EQ_INT(test_qmat_make(&q, SOTTO_WFMT_NVFP4, 1, 48, src, 1, 0), 0);
    CHECK(q.w.global_scale == 1.0f);
    CHECK(sotto_nvfp4_global_scale(2688.0f) == 1.0f);
    CHECK(sotto_nvfp4_global_scale(0.0f) == 1.0f);
    CHECK(sotto_nvfp4_global_scale(1.0f) == 1.0f / 2688.0f);
    const uint8_t *p = q.data, *s = q.scales;
    CHECK_EQ_INT(s[0], 0x38); /* 1.0 */
    CHECK_EQ_INT(s[1], 0x20); /* zero block: eps 0.125, as compressed-tensors */
    CHECK_EQ_INT(s[2], 0x7e); /* 448 */
    /* element 0 (6 -> 7) in the LOW nibble, element 1 (3 -> 5) high */
    CHECK_EQ_INT(p[0], 0x57);
    CHECK_EQ_INT(p[1], (1 << 4) | 0xb); /* -1.5 -> 0xb, 0.5 -> 1 */
    CHECK_EQ_INT(p[2], (0 << 4) | 0x8); /* -0 -> 0x8, 0.25 -> 0 (tie, even) */
    CHECK_EQ_INT(p[3], (0xe << 4) | 2); /* 0.75 -> 1.0 (tie), -5 -> -4 (tie) */
    CHECK_EQ_INT(p[6], (4 << 4) | 4);   /* 2.5 -> 2 (tie), 1.75 -> 2 (tie) */
    CHECK_EQ_INT(p[7], (0 << 4) | 8);   /* -0.1 -> -0, 0 -> 0 */
    for (int i = 8; i < 16; i++) CHECK_EQ_INT(p[i], 0);
    sotto_wmat_dequantize_rows(&q.w, 0, 1, back);
    const float want0[16] = {6, 3, -1.5f, 0.5f, -0.0f, 0, 1, -4, 4, 2, 1, -6, 2, 2, -0.0f, 0};
    CHECK(memcmp(back, want0, sizeof want0) == 0);
    for (int i = 16; i < 32; i++) CHECK(back[i] == 0.0f);
    CHECK(back[40] == 2688.0f); /* 6 * 448 * 1 */
    test_qmat_free(&q);
}

static void test_quant_errors(void) {
    float src[2 * 96];
    for (int i = 0; i < 2 * 96; i++) src[i] = frand();
    uint8_t data[2 * 96 * 4], scales[256];
    /* cols not a multiple of the block */
    const struct {
        sotto_wfmt f;
        int cols;
    } bad_cols[] = {{SOTTO_WFMT_Q8, 48}, {SOTTO_WFMT_NF4, 96}, {SOTTO_WFMT_NVFP4, 40}};
    for (size_t i = 0; i < 3; i++) {
        sotto_wmat w = {bad_cols[i].f, 2, bad_cols[i].cols, data, scales, NULL, 1.0f};
        CHECK_EQ_INT(sotto_quantize_rows(&w, data, scales, src, 0, 2), SOTTO_E_INVALID);
    }
    /* rows out of range */
    sotto_wmat w = {SOTTO_WFMT_Q8, 2, 64, data, scales, NULL, 0.0f};
    CHECK_EQ_INT(sotto_quantize_rows(&w, data, scales, src, 1, 2), SOTTO_E_INVALID);
    /* NaN / Inf rejected by every quantizer */
    const sotto_wfmt fmts[] = {SOTTO_WFMT_BF16, SOTTO_WFMT_Q8, SOTTO_WFMT_NF4, SOTTO_WFMT_NVFP4,
                               SOTTO_WFMT_F16};
    for (int k = 0; k < 2; k++)
        for (size_t i = 0; i < 5; i++) {
            float s2[64];
            for (int j = 0; j < 64; j++) s2[j] = frand();
            s2[37] = k ? INFINITY : NAN;
            sotto_wmat w2 = {fmts[i], 1, 64, data, scales, NULL, 1.0f};
            CHECK_EQ_INT(sotto_quantize_rows(&w2, data, scales, s2, 0, 1), SOTTO_E_FORMAT);
        }
}

/* relative RMS error of quantize + dequantize on Gaussian weights, and
 * chunked quantization == whole-matrix quantization */
static void test_quant_error_bounds(void) {
    const sotto_wfmt fmts[] = {SOTTO_WFMT_BF16, SOTTO_WFMT_Q8, SOTTO_WFMT_NF4, SOTTO_WFMT_NF4,
                               SOTTO_WFMT_NVFP4, SOTTO_WFMT_F16};
    const int dq[] = {0, 0, 0, 1, 0, 0};
    const double bound[] = {0.003, 0.012, 0.11, 0.11, 0.12, 0.0004};
    const int shapes[][2] = {{1, 64}, {3, 128}, {7, 192}, {37, 384}};
    for (size_t s = 0; s < 4; s++) {
        int rows = shapes[s][0], cols = shapes[s][1];
        size_t n = (size_t)rows * cols;
        float *src = malloc(n * 4), *back = malloc(n * 4), *back2 = malloc(n * 4);
        for (size_t i = 0; i < n; i++) src[i] = grand() * 0.03f;
        for (size_t f = 0; f < sizeof fmts / sizeof fmts[0]; f++) {
            test_qmat q, q2;
            CHECK_EQ_INT(test_qmat_make(&q, fmts[f], rows, cols, src, rows, dq[f]), 0);
            CHECK_EQ_INT(test_qmat_make(&q2, fmts[f], rows, cols, src, 3, dq[f]), 0);
            sotto_wmat_dequantize_rows(&q.w, 0, rows, back);
            /* row by row, in odd pieces */
            for (int r = 0; r < rows; r += 2)
                sotto_wmat_dequantize_rows(&q2.w, r, rows - r < 2 ? rows - r : 2,
                                           back2 + (size_t)r * cols);
            CHECK_MSG(memcmp(back, back2, n * 4) == 0, "%s %dx%d: chunked quantization differs",
                      sotto_wfmt_name(fmts[f]), rows, cols);
            double e2 = 0, s2 = 0;
            for (size_t i = 0; i < n; i++) {
                e2 += ((double)back[i] - src[i]) * ((double)back[i] - src[i]);
                s2 += (double)src[i] * src[i];
            }
            double rel = sqrt(e2 / s2);
            CHECK_MSG(rel < bound[f], "%s%s %dx%d: relative RMS error %.4f (bound %.3f)",
                      sotto_wfmt_name(fmts[f]), dq[f] ? "+dq" : "", rows, cols, rel, bound[f]);
            if (s == 3)
                fprintf(stderr, "  %-5s%s relative RMS error on N(0, .03^2) weights: %.4f\n",
                        sotto_wfmt_name(fmts[f]), dq[f] ? "+dq" : "   ", rel);
            test_qmat_free(&q), test_qmat_free(&q2);
        }
        free(src), free(back), free(back2);
    }
}

/* ---- library reference vectors ------------------------------------------------------------- */

typedef struct {
    char kind[16];
    int rows, cols;
    struct {
        char name[64];
        int count;
        uint32_t *v;
    } arr[8];
    int narr;
} refcase;

static void refcase_free(refcase *c) {
    for (int i = 0; i < c->narr; i++) free(c->arr[i].v);
    memset(c, 0, sizeof *c);
}

static int read_case(FILE *f, refcase *c) {
    char tok[64];
    memset(c, 0, sizeof *c);
    for (;;) {
        if (fscanf(f, "%63s", tok) != 1) return 0;
        if (tok[0] == '#') {
            int ch;
            while ((ch = fgetc(f)) != EOF && ch != '\n') {}
            continue;
        }
        if (strcmp(tok, "case") == 0) break;
        return -1;
    }
    if (fscanf(f, "%15s %d %d", c->kind, &c->rows, &c->cols) != 3) return -1;
    for (;;) {
        if (fscanf(f, "%63s", tok) != 1) return -1;
        if (strcmp(tok, "end") == 0) return 1;
        if (c->narr == 8) return -1;
        int k = c->narr++;
        snprintf(c->arr[k].name, sizeof c->arr[k].name, "%s", tok);
        if (fscanf(f, "%d", &c->arr[k].count) != 1 || c->arr[k].count < 0) return -1;
        c->arr[k].v = malloc(sizeof(uint32_t) * (size_t)(c->arr[k].count + 1));
        for (int i = 0; i < c->arr[k].count; i++) {
            unsigned u;
            if (fscanf(f, "%x", &u) != 1) return -1;
            c->arr[k].v[i] = u;
        }
    }
}

static const uint32_t *ref_arr(const refcase *c, const char *name, int count) {
    for (int i = 0; i < c->narr; i++)
        if (strcmp(c->arr[i].name, name) == 0) {
            CHECK_MSG(c->arr[i].count == count, "%s.%s: %d values, expected %d", c->kind, name,
                      c->arr[i].count, count);
            return c->arr[i].count == count ? c->arr[i].v : NULL;
        }
    CHECK_MSG(0, "%s: no array %s", c->kind, name);
    return NULL;
}

static float *ref_floats(const uint32_t *v, int n) {
    float *f = malloc(sizeof(float) * (n > 0 ? (unsigned)n : 1u));
    for (int i = 0; i < n; i++) f[i] = bits_f(v[i]);
    return f;
}

/* bitsandbytes' CPU rule: bucketize on the float32 midpoints */
static int nf4_cpu_rule(float x) {
    int q = 0;
    for (int i = 0; i < 15; i++) q += x > (sotto_nf4_code[i] + sotto_nf4_code[i + 1]) / 2.0f;
    return q;
}

static void ref_nf4(const refcase *c) {
    const int rows = c->rows, cols = c->cols, n = rows * cols;
    const uint32_t *in = ref_arr(c, "input", n), *pk = ref_arr(c, "packed", n / 2),
                   *pc = ref_arr(c, "packed_cuda", n / 2), *am = ref_arr(c, "absmax", n / 64),
                   *dq = ref_arr(c, "dequant", n);
    if (!in || !pk || !pc || !am || !dq) return;
    float *src = ref_floats(in, n), *back = malloc(sizeof(float) * (unsigned)n);
    test_qmat q;
    CHECK_EQ_INT(test_qmat_make(&q, SOTTO_WFMT_NF4, rows, cols, src, rows, 0), 0);
    const uint8_t *qp = q.data;
    const float *qa = q.scales;
    int bad_c = 0, bad_a = 0, bad_d = 0, cpu_diff = 0, cpu_unexplained = 0;
    for (int i = 0; i < n / 64; i++) bad_a += f_bits(qa[i]) != am[i];
    for (int i = 0; i < n / 2; i++) bad_c += qp[i] != pc[i]; /* CUDA: every byte */
    /* the CPU path: the same codes except in zero blocks and the 4 windows */
    for (int e = 0; e < n; e++) {
        uint8_t a = (e & 1) ? qp[e / 2] & 15 : qp[e / 2] >> 4;
        uint8_t b = (e & 1) ? pk[e / 2] & 15 : pk[e / 2] >> 4;
        if (a == b) continue;
        cpu_diff++;
        float amax = qa[e / 64];
        cpu_unexplained += amax != 0.0f && nf4_cpu_rule(src[e] * (1.0f / amax)) != b;
    }
    /* dequantize the library's bytes with sotto: bit for bit */
    uint8_t *lib_p = malloc((unsigned)n / 2);
    float *lib_a = ref_floats(am, n / 64);
    for (int i = 0; i < n / 2; i++) lib_p[i] = (uint8_t)pk[i];
    sotto_wmat lw = {SOTTO_WFMT_NF4, rows, cols, lib_p, lib_a, NULL, 0.0f};
    sotto_wmat_dequantize_rows(&lw, 0, rows, back);
    for (int i = 0; i < n; i++) bad_d += f_bits(back[i]) != dq[i];
    CHECK_MSG(bad_c == 0 && bad_a == 0 && bad_d == 0 && cpu_unexplained == 0,
              "nf4 %dx%d vs bitsandbytes: %d bytes differ from CUDA's, %d absmax, %d dequantized, "
              "%d codes from the CPU path's outside the known windows",
              rows, cols, bad_c, bad_a, bad_d, cpu_unexplained);
    if (cpu_diff)
        fprintf(stderr, "  nf4 %dx%d: %d codes differ from bitsandbytes' CPU path (zero blocks "
                "and CPU/CUDA threshold windows), none from its CUDA path\n", rows, cols, cpu_diff);
    test_qmat_free(&q);
    free(src), free(back), free(lib_p), free(lib_a);
}

static void ref_nf4dq(const refcase *c) {
    const int nb = c->rows * c->cols / 64;
    const uint32_t *am = ref_arr(c, "absmax", nb), *off = ref_arr(c, "offset", 1),
                   *cd = ref_arr(c, "codes", nb), *ne = ref_arr(c, "nested", (nb + 255) / 256),
                   *adq = ref_arr(c, "absmax_dq", nb);
    if (!am || !off || !cd || !ne || !adq) return;
    float *absmax = ref_floats(am, nb), offset;
    uint8_t *codes = malloc(nb);
    float *nested = malloc(sizeof(float) * ((nb + 255) / 256));
    sotto_nf4_double_quant(absmax, nb, codes, nested, &offset);
    CHECK_MSG(f_bits(offset) == off[0], "nf4dq offset %.9g vs %.9g", offset, bits_f(off[0]));
    int bad_c = 0, bad_n = 0, bad_a = 0;
    for (int i = 0; i < nb; i++) bad_c += codes[i] != cd[i];
    for (int i = 0; i < (nb + 255) / 256; i++) bad_n += f_bits(nested[i]) != ne[i];
    /* sotto's decode of the library's tables == the library's absmax, bit for bit:
     * through a one-block-per-row NF4 matrix whose codes are all 15 (1.0) */
    uint8_t *lc = malloc(nb), *ones = malloc((size_t)nb * 32);
    float *ln = ref_floats(ne, (nb + 255) / 256), *back = malloc(sizeof(float) * nb * 64);
    for (int i = 0; i < nb; i++) lc[i] = (uint8_t)cd[i];
    memset(ones, 0xff, (size_t)nb * 32);
    sotto_nf4_dq dq = {lc, ln, bits_f(off[0])};
    sotto_wmat w = {SOTTO_WFMT_NF4, nb, 64, ones, NULL, &dq, 0.0f};
    sotto_wmat_dequantize_rows(&w, 0, nb, back);
    for (int i = 0; i < nb; i++) bad_a += f_bits(back[(size_t)i * 64 + 5]) != adq[i];
    CHECK_MSG(bad_c == 0 && bad_n == 0 && bad_a == 0,
              "nf4 double quant vs bitsandbytes (%d blocks): %d codes, %d nested, %d absmax differ",
              nb, bad_c, bad_n, bad_a);
    free(absmax), free(codes), free(nested), free(lc), free(ones), free(ln), free(back);
}

static void ref_nvfp4(const refcase *c) {
    const int rows = c->rows, cols = c->cols, n = rows * cols;
    const uint32_t *in = ref_arr(c, "input", n), *gs = ref_arr(c, "global_scale", 1),
                   *sc = ref_arr(c, "scales", n / 16), *pk = ref_arr(c, "packed", n / 2),
                   *dq = ref_arr(c, "dequant", n);
    if (!in || !gs || !sc || !pk || !dq) return;
    float *src = ref_floats(in, n), *back = malloc(sizeof(float) * (unsigned)n);
    test_qmat q;
    CHECK_EQ_INT(test_qmat_make(&q, SOTTO_WFMT_NVFP4, rows, cols, src, rows, 0), 0);
    /* compressed-tensors stores the reciprocal of sotto's multiplier */
    CHECK_MSG(1.0f / q.w.global_scale == bits_f(gs[0]), "nvfp4 global scale 1/%.9g vs %.9g",
              q.w.global_scale, bits_f(gs[0]));
    int bad_s = 0, bad_p = 0, bad_d = 0;
    for (int i = 0; i < n / 16; i++) bad_s += ((uint8_t *)q.scales)[i] != sc[i];
    for (int i = 0; i < n / 2; i++) bad_p += ((uint8_t *)q.data)[i] != pk[i];
    /* sotto dequantizes the library's tensors to within 2 ulps (its global
     * multiplier is the rounded reciprocal of weight_global_scale) */
    uint8_t *lp = malloc((unsigned)n / 2), *ls = malloc((unsigned)n / 16);
    for (int i = 0; i < n / 2; i++) lp[i] = (uint8_t)pk[i];
    for (int i = 0; i < n / 16; i++) ls[i] = (uint8_t)sc[i];
    sotto_wmat lw = {SOTTO_WFMT_NVFP4, rows, cols, lp, ls, NULL, 1.0f / bits_f(gs[0])};
    sotto_wmat_dequantize_rows(&lw, 0, rows, back);
    for (int i = 0; i < n; i++) {
        float want = bits_f(dq[i]);
        bad_d += fabsf(back[i] - want) > 2.4e-7f * fabsf(want); /* 2 ulps */
    }
    CHECK_MSG(bad_s == 0 && bad_p == 0 && bad_d == 0,
              "nvfp4 %dx%d vs compressed-tensors: %d scales, %d packed bytes, %d dequantized differ",
              rows, cols, bad_s, bad_p, bad_d);
    test_qmat_free(&q);
    free(src), free(back), free(lp), free(ls);
}

static void ref_e4m3(const refcase *c) {
    const int n = c->cols;
    const uint32_t *in = ref_arr(c, "input", n), *cd = ref_arr(c, "codes", n);
    if (!in || !cd) return;
    int bad = 0;
    for (int i = 0; i < n; i++) {
        uint8_t q = sotto_e4m3_encode(bits_f(in[i]));
        if (q != cd[i] && bad++ < 5)
            fprintf(stderr, "  e4m3(%a): %02x, torch %02x\n", bits_f(in[i]), q, cd[i]);
    }
    CHECK_MSG(bad == 0, "e4m3: %d of %d codes differ from torch.float8_e4m3fn", bad, n);
}

static void ref_e2m1(const refcase *c) {
    const int n = c->cols;
    const uint32_t *in = ref_arr(c, "input", n), *pk = ref_arr(c, "packed", n / 2);
    if (!in || !pk) return;
    int bad = 0;
    for (int i = 0; i < n; i++) {
        float x = bits_f(in[i]);
        x = x > 6.0f ? 6.0f : x < -6.0f ? -6.0f : x;
        uint8_t want = (i & 1) ? pk[i / 2] >> 4 : pk[i / 2] & 15;
        uint8_t got = sotto_e2m1_encode(x);
        if (x == 0.0f) got &= 7, want &= 7; /* the sign of an exact zero differs by path */
        bad += got != want;
    }
    CHECK_MSG(bad == 0, "e2m1: %d of %d codes differ from compressed-tensors", bad, n);
}

static void test_reference_vectors(void) {
    const char *dir = getenv("SOTTO_SOURCE_DIR");
    char path[1024];
    snprintf(path, sizeof path, "%s/tests/data/quant_ref.txt", dir ? dir : ".");
    FILE *f = fopen(path, "r");
    CHECK_MSG(f != NULL, "cannot open %s", path);
    if (!f) return;
    int cases = 0, rc;
    refcase c;
    int seen[5] = {0};
    while ((rc = read_case(f, &c)) == 1) {
        cases++;
        if (strcmp(c.kind, "nf4") == 0) ref_nf4(&c), seen[0]++;
        else if (strcmp(c.kind, "nf4dq") == 0) ref_nf4dq(&c), seen[1]++;
        else if (strcmp(c.kind, "nvfp4") == 0) ref_nvfp4(&c), seen[2]++;
        else if (strcmp(c.kind, "e4m3") == 0) ref_e4m3(&c), seen[3]++;
        else if (strcmp(c.kind, "e2m1") == 0) ref_e2m1(&c), seen[4]++;
        else CHECK_MSG(0, "unknown case kind %s", c.kind);
        refcase_free(&c);
    }
    refcase_free(&c);
    fclose(f);
    CHECK_MSG(rc == 0, "%s: parse error after %d cases", path, cases);
    for (int i = 0; i < 5; i++) CHECK_MSG(seen[i] > 0, "case kind %d missing", i);
    fprintf(stderr, "  quant_ref: %d library cases checked\n", cases);
}

/* ---- kernels --------------------------------------------------------------------------------- */

static double rel_err_f(const float *a, const float *b, size_t n) {
    double *bd = malloc(sizeof(double) * (n ? n : 1));
    for (size_t i = 0; i < n; i++) bd[i] = b[i];
    double e = check_rel_err(a, bd, n);
    free(bd);
    return e;
}

/* Tolerance: the kernels sum in float (16 lanes, then across), the
 * references in double. Errors are measured against the largest
 * sum_c |W[j][c] x[r][c]| + |b[j]| (what float rounding scales with, unlike
 * the output itself, which can cancel): 2e-6 holds for cols up to a few
 * thousand. */
#define KERNEL_TOL 2e-6

static double err_vs(const float *a, const double *b, size_t n, double mag) {
    double num = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        num = d > num ? d : num;
    }
    return num / (mag > 1e-30 ? mag : 1e-30);
}

static double err_vs_f(const float *a, const float *b, size_t n, double mag) {
    double num = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        num = d > num ? d : num;
    }
    return num / (mag > 1e-30 ? mag : 1e-30);
}

/* x [n][cols] as sotto_linear(w, ..., n) feeds it to the products (in place):
   rounded to bf16 for the bf16 kernel (kernels/gemm_bf16.c), quantized and
   back for the int8 kernel (kernels/gemm_q8.c quantizes x as q8 weights are,
   so the kernel finds the same integers in x'), else unchanged. A reference
   on this x is the kernel's. */
static void x_as_kernel_sees(const sotto_wmat *w, int n, float *x) {
    const size_t count = (size_t)n * w->cols;
    if (sotto_linear_rounds_x_to_bf16(w, n)) {
        for (size_t i = 0; i < count; i++) x[i] = sotto_bf16_to_f32(sotto_f32_to_bf16(x[i]));
    } else if (sotto_linear_quantizes_x_to_q8(w, n)) {
        sotto_wmat m = {0};
        m.fmt = SOTTO_WFMT_Q8, m.rows = n, m.cols = w->cols;
        int8_t *q = malloc(count);
        float *sc = malloc(sizeof(float) * (count / 32));
        CHECK(q && sc);
        CHECK_EQ_INT(sotto_quantize_rows(&m, q, sc, x, 0, n), 0);
        m.data = q, m.scales = sc;
        sotto_wmat_dequantize_rows(&m, 0, n, x);
        free(q), free(sc);
    }
}

static void check_kernels_on(const test_qmat *q, const char *label) {
    const sotto_wmat *w = &q->w;
    const int rows = w->rows, cols = w->cols;
    /* fused kernels up to 32 rows of x (16 for f32), dequantize + sgemm above */
    const int ns[] = {1, 2, 3, 5, 16, 17, 32, 33, 40};
    float *Wd = malloc(sizeof(float) * (size_t)rows * cols);
    sotto_wmat_dequantize_rows(w, 0, rows, Wd);
    float *bias = malloc(sizeof(float) * rows);
    for (int j = 0; j < rows; j++) bias[j] = frand();
    for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++) {
        const int n = ns[ni];
        const size_t ny = (size_t)n * rows;
        float *x = malloc(sizeof(float) * (size_t)n * cols);
        for (size_t i = 0; i < (size_t)n * cols; i++) x[i] = frand();
        /* bf16 or q8 weights and encoder-sized x on a CPU with AVX512-BF16 / VNNI: the
           kernels round or quantize x, so the references get x as they see it; the rest
           of their contract (fp32 sums) is held to the same tolerance */
        x_as_kernel_sees(w, n, x);
        float *y = malloc(sizeof(float) * ny), *y0 = malloc(sizeof(float) * ny),
              *yr = malloc(sizeof(float) * ny), *ya = malloc(sizeof(float) * ny);
        double *dense = malloc(sizeof(double) * ny);
        for (size_t i = 0; i < ny; i++) y[i] = NAN, y0[i] = frand();
        /* dense math on the dequantized matrix, in double */
        double mag = 0;
        for (int r = 0; r < n; r++)
            for (int j = 0; j < rows; j++) {
                double s = bias[j], m = fabs(bias[j]);
                for (int c = 0; c < cols; c++) {
                    double p = (double)Wd[(size_t)j * cols + c] * x[(size_t)r * cols + c];
                    s += p, m += fabs(p);
                }
                dense[(size_t)r * rows + j] = s;
                mag = m > mag ? m : mag;
            }
        sotto_linear(w, bias, x, n, y);
        sotto_linear_ref(w, bias, x, n, yr, 0);
        double e1 = err_vs(y, dense, ny, mag), e2 = err_vs_f(y, yr, ny, mag),
               e3 = err_vs(yr, dense, ny, mag);
        CHECK_MSG(e1 < KERNEL_TOL && e2 < KERNEL_TOL && e3 < 1e-7,
                  "%s %dx%d n=%d: vs dense %.3g, vs scalar ref %.3g, ref vs dense %.3g", label,
                  rows, cols, n, e1, e2, e3);
        /* accumulate: y0 + W x + b */
        memcpy(ya, y0, sizeof(float) * ny);
        sotto_linear_acc(w, bias, x, n, ya);
        memcpy(yr, y0, sizeof(float) * ny);
        sotto_linear_ref(w, bias, x, n, yr, 1);
        for (size_t i = 0; i < ny; i++) dense[i] += y0[i];
        e1 = err_vs(ya, dense, ny, mag + 1.0), e2 = err_vs_f(ya, yr, ny, mag + 1.0);
        CHECK_MSG(e1 < KERNEL_TOL && e2 < KERNEL_TOL, "%s acc %dx%d n=%d: vs dense %.3g, vs ref %.3g",
                  label, rows, cols, n, e1, e2);
        /* no bias */
        sotto_linear(w, NULL, x, n, y);
        for (size_t i = 0; i < ny; i++) dense[i] -= y0[i] + bias[i % rows];
        e1 = err_vs(y, dense, ny, mag);
        CHECK_MSG(e1 < KERNEL_TOL, "%s nobias %dx%d n=%d: %.3g", label, rows, cols, n, e1);
        free(x), free(y), free(y0), free(yr), free(ya), free(dense);
    }
    free(Wd), free(bias);
}

static void test_kernels(void) {
    const int shapes[][2] = {{1, 64}, {3, 128}, {7, 192}, {5, 1536}, {33, 384}, {64, 64},
                             {100, 320}};
    const sotto_wfmt fmts[] = {SOTTO_WFMT_F32, SOTTO_WFMT_BF16, SOTTO_WFMT_Q8, SOTTO_WFMT_NF4,
                               SOTTO_WFMT_NF4, SOTTO_WFMT_NVFP4, SOTTO_WFMT_F16};
    const int dq[] = {0, 0, 0, 0, 1, 0, 0};
    for (int threads = 1; threads <= 2; threads++) {
        sotto_threads_set(threads);
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
            int rows = shapes[s][0], cols = shapes[s][1];
            float *src = malloc(sizeof(float) * (size_t)rows * cols);
            for (size_t i = 0; i < (size_t)rows * cols; i++) src[i] = grand() * 0.1f;
            if (rows > 2) /* an all-zero row */
                for (int c = 0; c < cols; c++) src[(size_t)2 * cols + c] = 0.0f;
            for (size_t f = 0; f < sizeof fmts / sizeof fmts[0]; f++) {
                test_qmat q;
                CHECK_EQ_INT(test_qmat_make(&q, fmts[f], rows, cols, src, rows, dq[f]), 0);
                char label[64];
                snprintf(label, sizeof label, "%s%s/%dt", sotto_wfmt_name(fmts[f]),
                         dq[f] ? "+dq" : "", threads);
                check_kernels_on(&q, label);
                test_qmat_free(&q);
            }
            free(src);
        }
        /* shapes with a tail past the last 32-column chunk: f32, f16, bf16 and nvfp4 */
        const int tails[][2] = {{3, 16}, {5, 48}, {9, 80}, {4, 7}, {6, 33}};
        const sotto_wfmt tail_fmts[] = {SOTTO_WFMT_BF16, SOTTO_WFMT_NVFP4, SOTTO_WFMT_F32,
                                        SOTTO_WFMT_F16};
        for (size_t t = 0; t < 5; t++) {
            int rows = tails[t][0], cols = tails[t][1];
            float *src = malloc(sizeof(float) * (size_t)rows * cols);
            for (size_t i = 0; i < (size_t)rows * cols; i++) src[i] = grand();
            for (int f = 0; f < 4; f++) {
                sotto_wfmt fmt = tail_fmts[f];
                if (cols % sotto_wfmt_block(fmt)) continue;
                test_qmat q;
                CHECK_EQ_INT(test_qmat_make(&q, fmt, rows, cols, src, rows, 0), 0);
                char label[64];
                snprintf(label, sizeof label, "%s-tail/%dt", sotto_wfmt_name(fmt), threads);
                check_kernels_on(&q, label);
                test_qmat_free(&q);
            }
            free(src);
        }
    }
    sotto_threads_set(0);
}

/* a large matrix, to cover the blocked dequantize + sgemm path with more
 * than one block of rows and the parallel skinny path */
static void test_kernels_large(void) {
    const int rows = 1500, cols = 512, n = 40;
    float *src = malloc(sizeof(float) * (size_t)rows * cols);
    for (size_t i = 0; i < (size_t)rows * cols; i++) src[i] = grand() * 0.05f;
    const sotto_wfmt fmts[] = {SOTTO_WFMT_BF16, SOTTO_WFMT_Q8, SOTTO_WFMT_NF4, SOTTO_WFMT_NVFP4,
                               SOTTO_WFMT_F16};
    float *x = malloc(sizeof(float) * (size_t)n * cols), *y = malloc(sizeof(float) * n * rows),
          *yr = malloc(sizeof(float) * n * rows);
    for (size_t i = 0; i < (size_t)n * cols; i++) x[i] = frand();
    for (size_t f = 0; f < 5; f++) {
        test_qmat q;
        CHECK_EQ_INT(test_qmat_make(&q, fmts[f], rows, cols, src, 256, fmts[f] == SOTTO_WFMT_NF4), 0);
        for (int nn = 1; nn <= n; nn += n - 1) {
            sotto_linear(&q.w, NULL, x, nn, y);
            /* the reference on x as the kernel sees it */
            float *xb = malloc(sizeof(float) * (size_t)nn * cols);
            memcpy(xb, x, sizeof(float) * (size_t)nn * cols);
            x_as_kernel_sees(&q.w, nn, xb);
            sotto_linear_ref(&q.w, NULL, xb, nn, yr, 0);
            free(xb);
            double e = rel_err_f(y, yr, (size_t)nn * rows);
            CHECK_MSG(e < KERNEL_TOL, "%s %dx%d n=%d: vs ref %.3g", sotto_wfmt_name(fmts[f]), rows,
                      cols, nn, e);
        }
        test_qmat_free(&q);
    }
    free(src), free(x), free(y), free(yr);
}

/* ---- scale search ------------------------------------------------------------------ */

/* Quantizes src with options into a fresh test_qmat (all rows at once). */
static int qmat_make_opt(test_qmat *q, sotto_wfmt fmt, int rows, int cols, const float *src,
                         const sotto_quant_opts *o) {
    if (test_qmat_alloc(q, fmt, rows, cols, src)) return -1;
    return test_qmat_quantize(q, src, 0, o);
}

/* Sum over rows of sum_j h_j (w_rj - q_rj)^2, per block of `block` columns
 * into blk[] (rows * cols / block entries) when blk is not NULL. */
static double weighted_error(const test_qmat *q, const float *src, const float *h, int block,
                             double *blk) {
    int rows = q->w.rows, cols = q->w.cols;
    float *back = malloc(sizeof(float) * (size_t)rows * cols);
    sotto_wmat_dequantize_rows(&q->w, 0, rows, back);
    double total = 0.0;
    for (int r = 0; r < rows; r++)
        for (int b = 0; b < cols / block; b++) {
            double e = 0.0;
            for (int j = b * block; j < (b + 1) * block; j++) {
                double d = (double)src[(size_t)r * cols + j] - back[(size_t)r * cols + j];
                e += (h ? h[j] : 1.0) * d * d;
            }
            if (blk) blk[(size_t)r * (cols / block) + b] = e;
            total += e;
        }
    free(back);
    return total;
}

static void test_scale_search(void) {
    const int rows = 48, cols = 256;
    float *src = malloc(sizeof(float) * rows * cols), h[256];
    for (int i = 0; i < rows * cols; i++) {
        src[i] = 0.02f * grand();
        if (i % 97 == 0) src[i] *= 8.0f; /* outliers, as trained weights have */
    }
    for (int j = 0; j < cols; j++) h[j] = j % 8 == 0 ? 20.0f : 0.05f + 0.5f * (frand() + 1.0f);
    const sotto_wfmt fmts[] = {SOTTO_WFMT_NF4, SOTTO_WFMT_NVFP4};
    for (int f = 0; f < 2; f++) {
        sotto_wfmt fmt = fmts[f];
        int block = sotto_wfmt_block(fmt), nblk = rows * cols / block;
        const char *name = sotto_wfmt_name(fmt);
        /* search off: bit-exact round to nearest */
        test_qmat rtn, off, mse, wtd;
        sotto_quant_opts o_off = {0, h}, o_mse = {1, NULL}, o_w = {1, h};
        CHECK_EQ_INT(test_qmat_make(&rtn, fmt, rows, cols, src, rows, 0), 0);
        CHECK_EQ_INT(qmat_make_opt(&off, fmt, rows, cols, src, &o_off), 0);
        CHECK_MSG(memcmp(rtn.data, off.data, sotto_wfmt_bytes(fmt, rows, cols) -
                                                (fmt == SOTTO_WFMT_NF4 ? (size_t)nblk * 4 : (size_t)nblk)) == 0,
                  "%s: search off differs from round to nearest", name);
        CHECK_EQ_INT(qmat_make_opt(&mse, fmt, rows, cols, src, &o_mse), 0);
        CHECK_EQ_INT(qmat_make_opt(&wtd, fmt, rows, cols, src, &o_w), 0);
        double *b_rtn = malloc(sizeof(double) * nblk), *b_mse = malloc(sizeof(double) * nblk);
        double *bw_rtn = malloc(sizeof(double) * nblk), *bw_w = malloc(sizeof(double) * nblk);
        double e_rtn = weighted_error(&rtn, src, NULL, block, b_rtn);
        double e_mse = weighted_error(&mse, src, NULL, block, b_mse);
        double ew_rtn = weighted_error(&rtn, src, h, block, bw_rtn);
        double ew_w = weighted_error(&wtd, src, h, block, bw_w);
        double ew_mse = weighted_error(&mse, src, h, block, NULL);
        /* never worse than round to nearest on its own measure, block by block */
        int worse = 0, worse_w = 0;
        for (int i = 0; i < nblk; i++) {
            worse += b_mse[i] > b_rtn[i] * (1 + 1e-6) + 1e-18;
            worse_w += bw_w[i] > bw_rtn[i] * (1 + 1e-6) + 1e-18;
        }
        CHECK_MSG(worse == 0 && worse_w == 0, "%s: %d / %d blocks worse than round to nearest",
                  name, worse, worse_w);
        /* and clearly better overall on these outlier-laden rows */
        CHECK_MSG(e_mse < 0.97 * e_rtn, "%s: search %.3g vs rtn %.3g", name, e_mse, e_rtn);
        CHECK_MSG(ew_w < 0.97 * ew_rtn, "%s: weighted %.3g vs rtn %.3g", name, ew_w, ew_rtn);
        /* the importance steers it: better on the weighted measure than plain search */
        CHECK_MSG(ew_w < ew_mse, "%s: weighted %.4g vs unweighted search %.4g", name, ew_w, ew_mse);
        fprintf(stderr, "  %s: squared error rtn %.4g, search %.4g (%.1f%%); weighted rtn %.4g, "
                        "weighted search %.4g (%.1f%%)\n",
                name, e_rtn, e_mse, 100 * (1 - e_mse / e_rtn), ew_rtn, ew_w,
                100 * (1 - ew_w / ew_rtn));
        /* the kernels read searched scales like any other */
        check_kernels_on(&wtd, fmt == SOTTO_WFMT_NF4 ? "nf4 searched" : "nvfp4 searched");
        free(b_rtn), free(b_mse), free(bw_rtn), free(bw_w);
        test_qmat_free(&rtn), test_qmat_free(&off), test_qmat_free(&mse), test_qmat_free(&wtd);
        /* a non-finite importance is refused */
        float hbad[256];
        memcpy(hbad, h, sizeof h);
        hbad[17] = NAN;
        sotto_quant_opts o_bad = {1, hbad};
        test_qmat bad;
        CHECK_EQ_INT(qmat_make_opt(&bad, fmt, rows, cols, src, &o_bad), SOTTO_E_FORMAT);
        test_qmat_free(&bad);
    }
    /* other formats ignore the options */
    test_qmat a, b;
    sotto_quant_opts o = {1, h};
    CHECK_EQ_INT(test_qmat_make(&a, SOTTO_WFMT_Q8, rows, cols, src, rows, 0), 0);
    CHECK_EQ_INT(qmat_make_opt(&b, SOTTO_WFMT_Q8, rows, cols, src, &o), 0);
    CHECK(memcmp(a.data, b.data, (size_t)rows * cols) == 0);
    test_qmat_free(&a), test_qmat_free(&b);
    free(src);
}

/* Every format and batch size (skinny kernels, the VNNI and BF16 GEMMs, dequantize
 * + sgemm): a row of x holding an Inf or a NaN gives that row non-finite outputs
 * (never finite numbers that look like a transcript), and the other rows stay
 * finite. */
static void test_nonfinite_x(void) {
    const int rows = 48, cols = 128;
    const int ns[] = {1, 3, 4, 5, 13, 64};
    const sotto_wfmt fmts[] = {SOTTO_WFMT_F32, SOTTO_WFMT_BF16, SOTTO_WFMT_Q8, SOTTO_WFMT_NF4,
                               SOTTO_WFMT_NVFP4, SOTTO_WFMT_F16};
    float *src = malloc(sizeof(float) * rows * cols);
    for (int i = 0; i < rows * cols; i++) src[i] = frand();
    for (size_t f = 0; f < sizeof fmts / sizeof fmts[0]; f++) {
        test_qmat q;
        CHECK_EQ_INT(test_qmat_make(&q, fmts[f], rows, cols, src, rows, 0), 0);
        for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++) {
            const int n = ns[ni];
            float *x = malloc(sizeof(float) * (size_t)n * cols), *y = malloc(sizeof(float) * (size_t)n * rows);
            for (int k = 0; k < 3; k++) {
                for (int i = 0; i < n * cols; i++) x[i] = frand();
                const int r = (k * 5) % n, c = (k * 37 + 5) % cols;
                x[(size_t)r * cols + c] = k == 0 ? NAN : k == 1 ? INFINITY : -INFINITY;
                sotto_linear(&q.w, NULL, x, n, y);
                int row_bad = 1, others_ok = 1;
                for (int i = 0; i < n; i++)
                    for (int j = 0; j < rows; j++) {
                        float v = y[(size_t)i * rows + j];
                        if (i == r) row_bad &= !isfinite(v);
                        else others_ok &= isfinite(v);
                    }
                CHECK_MSG(row_bad && others_ok, "%s n=%d x[%d][%d]=%s: its row non-finite %d, others finite %d",
                          sotto_wfmt_name(fmts[f]), n, r, c, k == 0 ? "NaN" : k == 1 ? "Inf" : "-Inf", row_bad,
                          others_ok);
            }
            free(x);
            free(y);
        }
        test_qmat_free(&q);
    }
    free(src);
}

int main(void) {
    test_format_table();
    test_nf4_codec();
    test_e2m1_codec();
    test_e4m3_codec();
    test_dyn8_map();
    test_double_quant();
    test_f16_roundtrip();
    test_f16_equals_f32();
    test_bf16_q8_roundtrip();
    test_nf4_by_hand();
    test_nvfp4_by_hand();
    test_quant_errors();
    test_quant_error_bounds();
    test_reference_vectors();
    test_kernels();
    test_kernels_large();
    test_scale_search();
    test_nonfinite_x();
    return check_report();
}
