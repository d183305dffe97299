/* test_mel.c - FFT, mel filter bank and log-mel against faster-whisper values. */
#define _POSIX_C_SOURCE 200809L
#include "check.h"
#include "fft.h"
#include "mapfile.h"
#include "mel.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifndef M_PI
#define M_PI 3.14159265358979323846
#endif

/* Same formula and evaluation order as ref_signal() in tests/ref/gen_mel_ref.py. */
static float *ref_signal(size_t n) {
    float *x = malloc((n ? n : 1) * sizeof *x);
    if (!x) return NULL;
    uint64_t state = 12345;
    for (size_t i = 0; i < n; i++) {
        state = (1103515245u * state + 12345u) % 2147483648u;
        double t = (double)i / 16000.0;
        double v = 0.4 * sin(2.0 * M_PI * 440.0 * t) + 0.2 * sin(2.0 * M_PI * 1500.0 * t + 0.7) +
                   0.05 * (double)(i % 1000) / 1000.0 * sin(2.0 * M_PI * 5200.5 * t) +
                   0.02 * ((double)state / 2147483648.0 - 0.5);
        if (i >= 20000 && i < 22000) v = 0.0;
        x[i] = (float)v;
    }
    return x;
}

static void test_fft(void) {
    const int sizes[] = {2, 4, 6, 10, 14, 22, 30, 64, 200, 400, 2 * 3 * 5 * 7 * 11};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        int n = sizes[s];
        sotto_fft *p = sotto_fft_create(n);
        CHECK(p != NULL);
        if (!p) continue;
        CHECK_EQ_INT(sotto_fft_len(p), n);
        float *x = malloc((size_t)n * sizeof *x);
        sotto_cpx *out = malloc(((size_t)n / 2 + 1) * sizeof *out);
        sotto_cpx *scr = malloc(sotto_fft_scratch_len(p) * sizeof *scr);
        for (int t = 0; t < n; t++) x[t] = (float)sin(0.37 * t * t + 0.1) + (t % 3 == 0 ? 0.5f : 0);
        sotto_fft_rfft(p, x, out, scr);
        double maxerr = 0.0, norm = 0.0;
        for (int k = 0; k <= n / 2; k++) {
            long double re = 0, im = 0;
            for (int t = 0; t < n; t++) {
                long double a = -2.0L * 3.14159265358979323846264338327950288L * (long double)k *
                                (long double)t / (long double)n;
                re += x[t] * cosl(a);
                im += x[t] * sinl(a);
            }
            double e = hypot((double)re - out[k].re, (double)im - out[k].im);
            if (e > maxerr) maxerr = e;
        }
        for (int t = 0; t < n; t++) norm += fabs(x[t]);
        CHECK_MSG(maxerr < 1e-12 * (norm + 1.0), "n=%d max error %g", n, maxerr);
        free(x);
        free(out);
        free(scr);
        sotto_fft_free(p);
    }
    CHECK(sotto_fft_create(0) == NULL);
    CHECK(sotto_fft_create(7) == NULL);
}

/* Filter values from faster-whisper 1.2.1:
 *   FeatureExtractor.get_mel_filters(16000, 400, n_mels).astype("float32")[m, k]
 * printed with "%.9g". */
typedef struct filt_ref {
    int m, k;
    float v;
} filt_ref;

static const filt_ref filt80[] = {
    {0, 1, 0.0248625949f},   {1, 1, 0.00199082191f},  {1, 2, 0.0228717718f},
    {10, 10, 0.0199082196f}, {10, 11, 0.00495437533f}, {40, 42, 0.00541110523f},
    {40, 43, 0.0147355655f}, {40, 44, 0.0065181898f},  {79, 186, 0.000366741675f},
    {79, 192, 0.00316471164f}, {79, 199, 0.000448759034f}, {0, 0, 0.0f},
    {0, 2, 0.0f},            {79, 200, 0.0f},
};
static const filt_ref filt128[] = {
    {0, 1, 0.0123739867f},    {1, 1, 0.0303925648f},    {64, 42, 0.00674968259f},
    {64, 43, 0.0180915184f},  {100, 100, 0.00257835095f}, {127, 191, 0.000475695095f},
    {127, 195, 0.0050416016f}, {127, 199, 0.0011142802f}, {127, 200, 0.0f},
};

static void check_filter_shape(const float *f, int n_mels) {
    const int nb = SOTTO_N_FFT / 2 + 1;
    for (int m = 0; m < n_mels; m++) {
        const float *row = f + (size_t)m * nb;
        int lo = -1, hi = -1, peak = 0, ok = 1;
        double sum = 0.0;
        for (int k = 0; k < nb; k++) {
            if (row[k] < 0.0f) ok = 0;
            if (row[k] > 0.0f) {
                if (lo < 0) lo = k;
                else if (hi != k - 1) ok = 0; /* a hole: not contiguous */
                hi = k;
            }
            if (row[k] > row[peak]) peak = k;
            sum += row[k];
        }
        CHECK_MSG(ok && lo >= 0, "n_mels %d row %d: not a single non-negative bump", n_mels, m);
        for (int k = lo + 1; k <= peak && lo >= 0; k++) ok &= row[k] >= row[k - 1];
        for (int k = peak + 1; k <= hi && lo >= 0; k++) ok &= row[k] <= row[k - 1];
        CHECK_MSG(ok, "n_mels %d row %d: not a triangle", n_mels, m);
        /* Slaney: unit area in Hz; the bin sum * 40 Hz approximates it when
         * the triangle covers enough bins. */
        if (hi - lo >= 8) CHECK_NEAR(sum * 40.0, 1.0, 0.1);
        if (m > 0) {
            /* centres move up with m */
            const float *prev = f + (size_t)(m - 1) * nb;
            int pp = 0;
            for (int k = 0; k < nb; k++)
                if (prev[k] > prev[pp]) pp = k;
            CHECK(peak >= pp);
        }
    }
}

static void test_filters(void) {
    sotto_err err;
    sotto_mel *m80 = sotto_mel_create(80, &err), *m128 = sotto_mel_create(128, &err);
    CHECK(m80 && m128);
    if (!m80 || !m128) goto done;
    CHECK_EQ_INT(sotto_mel_n_mels(m80), 80);
    CHECK_EQ_INT(sotto_mel_n_mels(m128), 128);
    const float *f80 = sotto_mel_filters(m80), *f128 = sotto_mel_filters(m128);
    const int nb = SOTTO_N_FFT / 2 + 1;
    for (size_t i = 0; i < sizeof filt80 / sizeof filt80[0]; i++)
        CHECK_NEAR(f80[filt80[i].m * nb + filt80[i].k], filt80[i].v, 1e-6 * filt80[i].v + 1e-12);
    for (size_t i = 0; i < sizeof filt128 / sizeof filt128[0]; i++)
        CHECK_NEAR(f128[filt128[i].m * nb + filt128[i].k], filt128[i].v,
                   1e-6 * filt128[i].v + 1e-12);
    check_filter_shape(f80, 80);
    check_filter_shape(f128, 128);
    CHECK(sotto_mel_create(0, &err) == NULL && err.code == SOTTO_E_INVALID);
    CHECK(sotto_mel_create(257, &err) == NULL && err.code == SOTTO_E_INVALID);
done:
    sotto_mel_free(m80);
    sotto_mel_free(m128);
}

/* Parses tests/data/mel_ref.txt and checks every stored case. */
static int ref_case(const char *line, char *name, int *nm, long *n, long *pad, long *nf,
                    double *mx) {
    return sscanf(line, "case %63s n_mels %d n %ld pad %ld n_frames %ld max %lf", name, nm, n,
                  pad, nf, mx) == 6;
}

static double ref_worst = 0.0;
static int ref_values = 0;

static void check_ref_frame(const char *line, const float *mel, size_t n_frames, int n_mels,
                            const char *name) {
    char *end = NULL;
    long f = strtol(line + 6, &end, 10);
    CHECK(f >= 0 && (size_t)f < n_frames);
    if (f < 0 || (size_t)f >= n_frames) return;
    double worst = 0.0;
    int count = 0;
    for (int m = 0; m < n_mels; m++) {
        char *e2 = NULL;
        double v = strtod(end, &e2);
        if (e2 == end) break;
        end = e2;
        count++;
        double d = fabs(v - mel[(size_t)m * n_frames + (size_t)f]);
        if (d > worst) worst = d;
    }
    ref_values += count;
    if (worst > ref_worst) ref_worst = worst;
    CHECK_EQ_INT(count, n_mels);
    CHECK_MSG(worst <= 1e-4, "%s frame %ld: max diff %g", name, f, worst);
}

static void test_reference(void) {
    const char *dir = getenv("SOTTO_SOURCE_DIR");
    char path[1024];
    snprintf(path, sizeof path, "%s/tests/data/mel_ref.txt", dir ? dir : ".");
    char *text = NULL;
    sotto_err err;
    int rc = sotto_read_file(path, 1 << 22, &text, NULL, &err);
    CHECK_MSG(rc == SOTTO_OK, "%s", err.msg);
    float *sig = ref_signal(40037), *mel = NULL;
    sotto_mel *m80 = sotto_mel_create(80, &err), *m128 = sotto_mel_create(128, &err);
    size_t n_frames = 0;
    int n_mels = 0, n_cases = 0;
    char name[64] = "";
    for (char *line = text, *next; rc == SOTTO_OK && line && *line; line = next) {
        next = strchr(line, '\n');
        if (next) *next++ = '\0';
        int nm;
        long n, pad, nf;
        double mx;
        if (ref_case(line, name, &nm, &n, &pad, &nf, &mx)) {
            free(mel);
            mel = NULL;
            n_cases++;
            n_mels = nm;
            int r = sotto_mel_compute(nm == 80 ? m80 : m128, sig, (size_t)n, (size_t)pad, 1, &mel,
                                      &n_frames, &err);
            CHECK_MSG(r == SOTTO_OK, "%s: %s", name, err.msg);
            CHECK_EQ_INT(n_frames, nf);
            double got_max = -1e30;
            for (size_t i = 0; mel && i < n_frames * (size_t)nm; i++)
                if (mel[i] > got_max) got_max = mel[i];
            CHECK_MSG(fabs(got_max - mx) <= 1e-4, "%s: max %g vs %g", name, got_max, mx);
        } else if (strncmp(line, "frame ", 6) == 0 && mel) {
            check_ref_frame(line, mel, n_frames, n_mels, name);
        }
    }
    CHECK_EQ_INT(n_cases, 8);
    fprintf(stderr, "mel_ref: %d cases, %d values, worst |diff| %.3g\n", n_cases, ref_values,
            ref_worst);
    free(mel);
    free(sig);
    free(text);
    sotto_mel_free(m80);
    sotto_mel_free(m128);
}

static void test_frames_and_threads(void) {
    sotto_err err;
    sotto_mel *mel = sotto_mel_create(80, &err);
    float *sig = ref_signal(40037);
    CHECK(mel && sig);
    if (!mel || !sig) goto done;
    const size_t lens[][2] = {{1, 0}, {0, 1}, {159, 0}, {100, 59}, {160, 0}, {0, 160},
                              {1, 318}, {319, 0}, {320, 0}, {12345, 160}};
    for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++) {
        float *out = NULL;
        size_t nf = 99;
        int r = sotto_mel_compute(mel, sig, lens[i][0], lens[i][1], 1, &out, &nf, &err);
        CHECK_EQ_INT(r, SOTTO_OK);
        CHECK_EQ_INT(nf, (lens[i][0] + lens[i][1]) / 160);
        CHECK(out != NULL);
        for (size_t j = 0; out && j < nf * 80; j++) CHECK(isfinite(out[j]));
        free(out);
    }
    float *out = NULL;
    size_t nf = 0;
    CHECK_EQ_INT(sotto_mel_compute(mel, sig, 0, 0, 1, &out, &nf, &err), SOTTO_E_INVALID);
    CHECK(out == NULL);
    /* All-zero input: every value is log10(1e-10) = -10, so (-10 + 4) / 4. */
    CHECK_EQ_INT(sotto_mel_compute(mel, NULL, 0, SOTTO_N_SAMPLES, 0, &out, &nf, &err), SOTTO_OK);
    CHECK_EQ_INT(nf, SOTTO_N_FRAMES);
    int all = 1;
    for (size_t j = 0; out && j < nf * 80; j++) all &= out[j] == -1.5f;
    CHECK(out && all);
    free(out);
    /* Threads give bit-identical output. */
    float *a = NULL, *b = NULL;
    size_t na = 0, nb = 0;
    CHECK_EQ_INT(sotto_mel_compute(mel, sig, 40037, 480000, 1, &a, &na, &err), SOTTO_OK);
    CHECK_EQ_INT(sotto_mel_compute(mel, sig, 40037, 480000, 3, &b, &nb, &err), SOTTO_OK);
    CHECK(na == nb && a && b && memcmp(a, b, na * 80 * sizeof *a) == 0);
    free(a);
    free(b);
done:
    free(sig);
    sotto_mel_free(mel);
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Informational: time for 30 s of audio on one thread (not asserted). */
static void bench_30s(void) {
    sotto_err err;
    sotto_mel *mel = sotto_mel_create(80, &err);
    float *sig = ref_signal(SOTTO_N_SAMPLES);
    if (!mel || !sig) goto done;
    for (size_t i = 22000; i < SOTTO_N_SAMPLES; i++) sig[i] = sig[i % 20000];
    double best = 1e9;
    for (int rep = 0; rep < 3; rep++) {
        float *out = NULL;
        size_t nf = 0;
        double t0 = now_s();
        int r = sotto_mel_compute(mel, sig, SOTTO_N_SAMPLES, 160, 1, &out, &nf, &err);
        double dt = now_s() - t0;
        CHECK_EQ_INT(r, SOTTO_OK);
        if (dt < best) best = dt;
        free(out);
    }
    fprintf(stderr, "mel: 30 s of audio (3001 frames, 80 mels, 1 thread): %.1f ms\n", best * 1e3);
done:
    free(sig);
    sotto_mel_free(mel);
}

int main(void) {
    test_fft();
    test_filters();
    test_reference();
    test_frames_and_threads();
    bench_30s();
    return check_report();
}
