/* test_resample.c - speexdsp conversion: exact lengths, delay compensation,
 * streaming == one-shot, identity, bad arguments. */
#define _POSIX_C_SOURCE 200809L
#include "check.h"
#include "resample.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#ifndef M_PI
#define M_PI 3.14159265358979323846
#endif

static size_t expect_len(size_t n, int in, int out) {
    return (size_t)(((uint64_t)n * (uint64_t)out + (uint64_t)in / 2) / (uint64_t)in);
}

static void test_lengths(void) {
    const int rates[] = {8000, 11025, 16000, 22050, 32000, 44100, 48000, 96000, 7919};
    const int outs[] = {16000, 8000, 22050, 44100, 48000};
    const size_t lens[] = {0, 1, 2, 3, 7, 100, 159, 1000, 12345, 44101};
    const int quals[] = {SOTTO_RESAMPLE_QUALITY_FILE, SOTTO_RESAMPLE_QUALITY_STREAM, 0};
    float *x = malloc(44101 * sizeof *x);
    for (size_t i = 0; i < 44101; i++) x[i] = (float)sin(0.01 * (double)i);
    int bad = 0, total = 0;
    for (size_t q = 0; q < 3; q++)
        for (size_t a = 0; a < sizeof rates / sizeof rates[0]; a++)
            for (size_t b = 0; b < sizeof outs / sizeof outs[0]; b++)
                for (size_t l = 0; l < sizeof lens / sizeof lens[0]; l++) {
                    float *y = NULL;
                    size_t ny = 0;
                    sotto_err err;
                    int r = sotto_resample(x, lens[l], rates[a], outs[b], quals[q], &y, &ny, &err);
                    total++;
                    if (r != SOTTO_OK || ny != expect_len(lens[l], rates[a], outs[b]) || !y) {
                        bad++;
                        fprintf(stderr, "len: n=%zu %d->%d q%d: rc %d, %zu samples (want %zu)\n",
                                lens[l], rates[a], outs[b], quals[q], r, ny,
                                expect_len(lens[l], rates[a], outs[b]));
                    }
                    free(y);
                }
    CHECK_MSG(bad == 0, "%d of %d length cases wrong", bad, total);
    free(x);
}

/* Converts a sine at in_rate to 16 kHz and compares with the analytic sine
 * at 16 kHz away from the ends; returns the interior RMS error at `lag`. */
static double sine_rms(int in_rate, double freq, int quality, int lag) {
    const double secs = 0.5, phase = 0.3;
    size_t n = (size_t)(secs * in_rate);
    float *x = malloc(n * sizeof *x), *y = NULL;
    for (size_t i = 0; i < n; i++)
        x[i] = (float)(0.5 * sin(2.0 * M_PI * freq * (double)i / in_rate + phase));
    size_t ny = 0;
    sotto_err err;
    int r = sotto_resample(x, n, in_rate, 16000, quality, &y, &ny, &err);
    CHECK_EQ_INT(r, SOTTO_OK);
    double se = 0.0;
    size_t cnt = 0;
    for (size_t j = 200; y && j + 200 < ny; j++) {
        double want = 0.5 * sin(2.0 * M_PI * freq * (double)((long)j + lag) / 16000.0 + phase);
        se += (y[j] - want) * (y[j] - want);
        cnt++;
    }
    free(x);
    free(y);
    return cnt ? sqrt(se / (double)cnt) : 1e9;
}

static void test_sine(void) {
    const int in_rates[] = {44100, 8000, 22050, 48000, 11025};
    const double freqs[] = {440.0, 1000.0, 2500.0};
    double worst10 = 0.0, worst5 = 0.0;
    for (size_t a = 0; a < sizeof in_rates / sizeof in_rates[0]; a++)
        for (size_t f = 0; f < sizeof freqs / sizeof freqs[0]; f++) {
            double e0 = sine_rms(in_rates[a], freqs[f], SOTTO_RESAMPLE_QUALITY_FILE, 0);
            double e5 = sine_rms(in_rates[a], freqs[f], SOTTO_RESAMPLE_QUALITY_STREAM, 0);
            double em = sine_rms(in_rates[a], freqs[f], SOTTO_RESAMPLE_QUALITY_FILE, -1);
            double ep = sine_rms(in_rates[a], freqs[f], SOTTO_RESAMPLE_QUALITY_FILE, 1);
            worst10 = fmax(worst10, e0);
            worst5 = fmax(worst5, e5);
            CHECK_MSG(e0 < 1e-4, "%d Hz sine %.0f Hz q10: rms error %g", in_rates[a], freqs[f], e0);
            CHECK_MSG(e5 < 1e-3, "%d Hz sine %.0f Hz q5: rms error %g", in_rates[a], freqs[f], e5);
            /* One sample early or late is far worse: the delay is compensated. */
            CHECK_MSG(em > 20 * e0 && ep > 20 * e0, "%d Hz sine %.0f Hz: lag -1 %g, 0 %g, +1 %g",
                      in_rates[a], freqs[f], em, e0, ep);
        }
    fprintf(stderr, "sine -> 16 kHz: worst interior rms error %.2g (q10), %.2g (q5)\n", worst10,
            worst5);
}

static uint32_t lcg(uint32_t *s) {
    *s = *s * 1664525u + 1013904223u;
    return *s >> 8;
}

/* Streams x in random pieces (0 .. max_piece samples) and flushes; returns
 * the concatenated output (malloc'd) and its length. */
static float *stream_all(sotto_resampler *rs, const float *x, size_t n, size_t max_piece,
                         uint32_t seed, size_t *n_out) {
    size_t cap = sotto_resampler_max_out(rs, n) + 16, made = 0;
    float *y = malloc(cap * sizeof *y);
    uint32_t s = seed;
    for (size_t i = 0; i < n;) {
        size_t k = lcg(&s) % (max_piece + 1);
        if (k > n - i) k = n - i;
        size_t got = 0, room = sotto_resampler_max_out(rs, k);
        CHECK(made + room <= cap);
        int r = sotto_resampler_process(rs, x + i, k, y + made, room, &got);
        CHECK_EQ_INT(r, SOTTO_OK);
        made += got;
        i += k;
    }
    size_t tail = 0;
    size_t room = sotto_resampler_max_out(rs, 0);
    CHECK_EQ_INT(sotto_resampler_flush(rs, y + made, room, &tail), SOTTO_OK);
    *n_out = made + tail;
    return y;
}

static void test_streaming(void) {
    const int pairs[][2] = {{44100, 16000}, {8000, 16000}, {48000, 16000}, {22050, 16000},
                            {11025, 16000}, {16000, 44100}, {16000, 16000}, {32000, 16000}};
    const size_t n = 33333;
    float *x = malloc(n * sizeof *x);
    uint32_t s = 7;
    for (size_t i = 0; i < n; i++)
        x[i] = (float)(0.3 * sin(0.05 * (double)i) + 0.1 * ((double)lcg(&s) / 16777216.0 - 0.5));
    for (size_t p = 0; p < sizeof pairs / sizeof pairs[0]; p++) {
        int in = pairs[p][0], out = pairs[p][1];
        for (int q = SOTTO_RESAMPLE_QUALITY_STREAM; q <= SOTTO_RESAMPLE_QUALITY_FILE; q += 5) {
            float *ref = NULL;
            size_t nref = 0;
            sotto_err err;
            CHECK_EQ_INT(sotto_resample(x, n, in, out, q, &ref, &nref, &err), SOTTO_OK);
            sotto_resampler *rs = sotto_resampler_create(in, out, q, &err);
            CHECK(rs != NULL);
            if (!rs || !ref) {
                free(ref);
                continue;
            }
            /* Twice on the same object: flush resets it for a new stream. */
            for (int round = 0; round < 2; round++) {
                size_t ny = 0;
                float *y = stream_all(rs, x, n, round ? 1000 : 37, 99u + (uint32_t)round, &ny);
                CHECK_EQ_INT(ny, nref);
                /* speexdsp filters each output sample from the same inputs and
                 * phase however the input is split: results are identical. */
                CHECK_MSG(ny == nref && memcmp(y, ref, ny * sizeof *y) == 0,
                          "%d->%d q%d round %d: streaming differs from one-shot", in, out, q,
                          round);
                free(y);
            }
            sotto_resampler_free(rs);
            free(ref);
        }
    }
    free(x);
}

static void test_identity_and_errors(void) {
    float x[5] = {0.1f, -0.2f, 0.3f, 1.0f, -1.0f}, *y = NULL, buf[16];
    size_t ny = 0;
    sotto_err err;
    CHECK_EQ_INT(sotto_resample(x, 5, 16000, 16000, 10, &y, &ny, &err), SOTTO_OK);
    CHECK(ny == 5 && y && memcmp(x, y, sizeof x) == 0);
    free(y);
    y = NULL;
    CHECK_EQ_INT(sotto_resample(NULL, 0, 44100, 16000, 10, &y, &ny, &err), SOTTO_OK);
    CHECK(ny == 0);
    free(y);
    const int bad[][3] = {{0, 16000, 10},      {16000, 0, 10},     {-8000, 16000, 10},
                          {16000, -1, 10},     {384001, 16000, 10}, {16000, 400000, 10},
                          {384000, 900, 10},   {16000, 8000, 11},  {16000, 8000, -1}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        y = NULL;
        sotto_err_clear(&err);
        CHECK_EQ_INT(sotto_resample(x, 5, bad[i][0], bad[i][1], bad[i][2], &y, &ny, &err),
                     SOTTO_E_INVALID);
        CHECK(y == NULL && err.code == SOTTO_E_INVALID && err.msg[0] != '\0');
        CHECK(sotto_resampler_create(bad[i][0], bad[i][1], bad[i][2], &err) == NULL);
        CHECK_EQ_INT(err.code, SOTTO_E_INVALID);
    }
    /* Streaming identity is a copy; a too-small buffer is refused. */
    sotto_resampler *rs = sotto_resampler_create(16000, 16000, 5, &err);
    CHECK(rs != NULL);
    if (rs) {
        CHECK_EQ_INT(sotto_resampler_max_out(rs, 5), 5);
        CHECK_EQ_INT(sotto_resampler_process(rs, x, 5, buf, 4, &ny), SOTTO_E_RANGE);
        CHECK_EQ_INT(sotto_resampler_process(rs, x, 5, buf, 16, &ny), SOTTO_OK);
        CHECK(ny == 5 && memcmp(buf, x, sizeof x) == 0);
        CHECK_EQ_INT(sotto_resampler_flush(rs, buf, 16, &ny), SOTTO_OK);
        CHECK_EQ_INT(ny, 0);
        sotto_resampler_free(rs);
    }
    rs = sotto_resampler_create(48000, 16000, 5, &err);
    CHECK(rs != NULL);
    if (rs) {
        float big[4800] = {0};
        size_t need = sotto_resampler_max_out(rs, 4800);
        CHECK(need >= 1600 && need <= 1602);
        CHECK_EQ_INT(sotto_resampler_process(rs, big, 4800, buf, 16, &ny), SOTTO_E_RANGE);
        CHECK_EQ_INT(sotto_resampler_process(rs, NULL, 5, buf, 16, &ny), SOTTO_E_INVALID);
        sotto_resampler_free(rs);
    }
    sotto_resampler_free(NULL);
}

int main(void) {
    test_lengths();
    test_sine();
    test_streaming();
    test_identity_and_errors();
    return check_report();
}
