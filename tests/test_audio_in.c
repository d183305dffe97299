/* test_audio_in.c - session audio decoding: PCM s16/f32 mono/stereo at any
 * rate (exact at 16 kHz, aligned sines and exact lengths elsewhere, chunking
 * invariance, malformed messages, NaN/Inf), Opus packets of every frame size
 * from libopus's own encoder (length, delay, correlation), and garbage
 * packets (concealed, counted, decoder keeps working). */
#define _POSIX_C_SOURCE 200809L
#include "audio_in.h"
#include "check.h"

#include <math.h>
#include <opus/opus.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#ifndef M_PI
#define M_PI 3.14159265358979323846
#endif

static uint32_t lcg(uint32_t *s) {
    *s = *s * 1664525u + 1013904223u;
    return *s >> 8;
}

static double urand(uint32_t *s) { return (double)lcg(s) / 16777216.0; } /* [0, 1) */

static size_t expect_len(uint64_t n, int rate) {
    return (size_t)((n * 16000u + (uint64_t)rate / 2) / (uint64_t)rate);
}

/* Interleaved float frames -> message bytes of the encoding (little-endian). */
static unsigned char *pcm_bytes(sotto_encoding enc, const float *x, size_t n_samples,
                                size_t *len) {
    size_t bps = enc == SOTTO_ENCODING_PCM_S16LE ? 2 : 4;
    unsigned char *b = malloc(n_samples * bps + 1);
    for (size_t i = 0; i < n_samples; i++) {
        if (enc == SOTTO_ENCODING_PCM_S16LE) {
            double v = floor((double)x[i] * 32768.0 + 0.5);
            v = v > 32767 ? 32767 : v < -32768 ? -32768 : v;
            uint16_t u = (uint16_t)(int16_t)v;
            b[2 * i] = (unsigned char)(u & 0xFF);
            b[2 * i + 1] = (unsigned char)(u >> 8);
        } else {
            uint32_t u;
            memcpy(&u, &x[i], 4);
            for (int k = 0; k < 4; k++) b[4 * i + (size_t)k] = (unsigned char)(u >> (8 * k));
        }
    }
    *len = n_samples * bps;
    return b;
}

/* Pushes `len` bytes in random whole-frame pieces of 0..max_piece frames
 * (max_piece 0: one message), flushes; returns the output (malloc'd). */
static float *run_pcm(sotto_audio_in *a, const unsigned char *b, size_t len, size_t fbytes,
                      size_t max_piece, uint32_t seed, size_t *n_out) {
    size_t cap = sotto_audio_in_max_out(a, len) + 16, made = 0;
    float *y = malloc(cap * sizeof *y);
    uint32_t s = seed;
    for (size_t off = 0; off < len || (max_piece == 0 && len == 0);) {
        size_t k = max_piece ? (lcg(&s) % (max_piece + 1)) * fbytes : len;
        if (k > len - off) k = len - off;
        size_t room = sotto_audio_in_max_out(a, k), got = 0;
        CHECK(made + room <= cap);
        sotto_err err;
        int r = sotto_audio_in_push(a, b + off, k, y + made, room, &got, &err);
        CHECK_MSG(r == SOTTO_OK, "push %zu bytes: %s", k, err.msg);
        made += got;
        off += k;
        if (len == 0) break;
    }
    size_t tail = 0;
    CHECK_EQ_INT(sotto_audio_in_flush(a, y + made, cap - made, &tail), SOTTO_OK);
    *n_out = made + tail;
    return y;
}

static void test_names_and_params(void) {
    sotto_encoding e = SOTTO_ENCODING_OPUS;
    CHECK(sotto_encoding_parse("pcm_s16le", &e) == 0 && e == SOTTO_ENCODING_PCM_S16LE);
    CHECK(sotto_encoding_parse("pcm_f32le", &e) == 0 && e == SOTTO_ENCODING_PCM_F32LE);
    CHECK(sotto_encoding_parse("opus", &e) == 0 && e == SOTTO_ENCODING_OPUS);
    CHECK_EQ_INT(sotto_encoding_parse("mp3", &e), SOTTO_E_INVALID);
    CHECK_EQ_INT(sotto_encoding_parse("", &e), SOTTO_E_INVALID);
    CHECK_EQ_INT(sotto_encoding_parse(NULL, &e), SOTTO_E_INVALID);
    CHECK_STR(sotto_encoding_name(SOTTO_ENCODING_PCM_F32LE), "pcm_f32le");
    CHECK_STR(sotto_encoding_name(SOTTO_ENCODING_OPUS), "opus");
    const int bad[][2] = {{7999, 1}, {48001, 1}, {0, 1}, {-16000, 1}, {16000, 0}, {16000, 3},
                          {16000, -1}};
    for (int enc = 0; enc < 3; enc++)
        for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
            sotto_err err;
            sotto_err_clear(&err);
            sotto_audio_in *a = sotto_audio_in_create((sotto_encoding)enc, bad[i][0], bad[i][1],
                                                      &err);
            CHECK(a == NULL);
            CHECK_EQ_INT(err.code, SOTTO_E_INVALID);
            CHECK_MSG(strstr(err.msg, bad[i][1] == 1 ? "sample_rate" : "channels") != NULL,
                      "message does not name the parameter: %s", err.msg);
            sotto_audio_in_free(a);
        }
    const int good[] = {8000, 11025, 12345, 16000, 22050, 44100, 48000};
    for (int enc = 0; enc < 3; enc++)
        for (size_t i = 0; i < sizeof good / sizeof good[0]; i++)
            for (int ch = 1; ch <= 2; ch++) {
                sotto_err err;
                sotto_audio_in *a = sotto_audio_in_create((sotto_encoding)enc, good[i], ch, &err);
                CHECK_MSG(a != NULL, "%d Hz %d ch: %s", good[i], ch, err.msg);
                sotto_audio_in_free(a);
            }
    sotto_audio_in_free(NULL);
}

/* 16 kHz: no resampler, the samples come out exactly. */
static void test_16k_exact(void) {
    const size_t n = 5000;
    uint32_t s = 11;
    int16_t *i16 = malloc(2 * n * sizeof *i16);
    float *f = malloc(2 * n * sizeof *f), *want = malloc(n * sizeof *want);
    unsigned char *b16 = malloc(4 * n), *b32 = malloc(8 * n);
    for (size_t i = 0; i < 2 * n; i++) {
        i16[i] = (int16_t)((int)(lcg(&s) & 0xFFFF) - 32768);
        f[i] = (float)(2.0 * urand(&s) - 1.0) * 1.5f;
        uint16_t u = (uint16_t)i16[i];
        b16[2 * i] = (unsigned char)(u & 0xFF);
        b16[2 * i + 1] = (unsigned char)(u >> 8);
        uint32_t v;
        memcpy(&v, &f[i], 4);
        for (int k = 0; k < 4; k++) b32[4 * i + (size_t)k] = (unsigned char)(v >> (8 * k));
    }
    for (int enc = 0; enc < 2; enc++)
        for (int ch = 1; ch <= 2; ch++) {
            for (size_t i = 0; i < n; i++) {
                if (enc == 0)
                    want[i] = ch == 1 ? (float)i16[i] / 32768.0f
                                      : (float)((double)i16[2 * i] + i16[2 * i + 1]) / 65536.0f;
                else
                    want[i] = ch == 1 ? f[i] : 0.5f * f[2 * i] + 0.5f * f[2 * i + 1];
            }
            sotto_err err;
            sotto_audio_in *a = sotto_audio_in_create((sotto_encoding)enc, 16000, ch, &err);
            CHECK(a != NULL);
            if (!a) continue;
            size_t fb = (size_t)ch * (enc == 0 ? 2 : 4), ny = 0;
            CHECK_EQ_INT(sotto_audio_in_max_out(a, n * fb), n);
            float *y = run_pcm(a, enc == 0 ? b16 : b32, n * fb, fb, 333, 5u + (uint32_t)ch, &ny);
            CHECK_EQ_INT(ny, n);
            CHECK_MSG(ny == n && memcmp(y, want, n * sizeof *y) == 0,
                      "16 kHz enc %d ch %d not bit-exact", enc, ch);
            sotto_audio_in_stats st;
            sotto_audio_in_get_stats(a, &st);
            CHECK_EQ_INT(st.input_frames, n);
            CHECK_EQ_INT(st.output_samples, n);
            CHECK_EQ_INT(st.rejected, 0);
            CHECK_EQ_INT(st.nonfinite, 0);
            free(y);
            sotto_audio_in_free(a);
        }
    free(i16);
    free(f);
    free(want);
    free(b16);
    free(b32);
}

/* A sine at `rate` comes out at 16 kHz with the same frequency and phase:
 * e[0..2] are the interior RMS errors against the analytic 16 kHz sine
 * shifted by -1, 0 and +1 samples. */
static void sine_case(sotto_encoding enc, int rate, int ch, double freq, double e[3], size_t *ny,
                      size_t *nin) {
    const double phase = 0.3;
    size_t n = (size_t)(0.5 * rate) + 7; /* not a whole number of 20 ms */
    float *x = calloc(n * (size_t)ch, sizeof *x);
    uint32_t s = 3;
    for (size_t i = 0; i < n; i++) {
        double v = 0.5 * sin(2.0 * M_PI * freq * (double)i / rate + phase);
        double d = ch == 2 ? 0.1 * (urand(&s) - 0.5) : 0.0; /* cancels in the downmix */
        for (int c = 0; c < ch; c++) x[i * (size_t)ch + (size_t)c] = (float)(c ? v - d : v + d);
    }
    size_t len = 0;
    unsigned char *b = pcm_bytes(enc, x, n * (size_t)ch, &len);
    sotto_err err;
    sotto_audio_in *a = sotto_audio_in_create(enc, rate, ch, &err);
    float *y = run_pcm(a, b, len, len / n, (size_t)rate / 50, 1, ny);
    *nin = n;
    for (int lag = -1; lag <= 1; lag++) {
        double se = 0.0;
        size_t cnt = 0;
        for (size_t j = 200; j + 200 < *ny; j++) {
            double w = 0.5 * sin(2.0 * M_PI * freq * (double)((long)j + lag) / 16000.0 + phase);
            se += (y[j] - w) * (y[j] - w);
            cnt++;
        }
        e[lag + 1] = cnt ? sqrt(se / (double)cnt) : 1e9;
    }
    free(x);
    free(b);
    free(y);
    sotto_audio_in_free(a);
}

static void test_resampled_sine(void) {
    const int rates[] = {8000, 11025, 22050, 32000, 44100, 48000, 12345};
    const double freqs[] = {440.0, 1000.0, 3000.0};
    double worst = 0.0;
    for (size_t r = 0; r < sizeof rates / sizeof rates[0]; r++)
        for (size_t f = 0; f < 3; f++)
            for (int enc = 0; enc < 2; enc++)
                for (int ch = 1; ch <= 2; ch++) {
                    size_t ny = 0, nin = 0;
                    double e[3];
                    sine_case((sotto_encoding)enc, rates[r], ch, freqs[f], e, &ny, &nin);
                    worst = fmax(worst, e[1]);
                    CHECK_EQ_INT(ny, expect_len(nin, rates[r]));
                    CHECK_MSG(e[1] < 2e-3, "%d Hz %.0f Hz enc %d ch %d: rms %g", rates[r],
                              freqs[f], enc, ch, e[1]);
                    /* One sample early or late is far worse: aligned. */
                    CHECK_MSG(e[0] > 20 * e[1] && e[2] > 20 * e[1],
                              "%d Hz %.0f Hz: misaligned (lag -1 %g, 0 %g, +1 %g)", rates[r],
                              freqs[f], e[0], e[1], e[2]);
                }
    fprintf(stderr, "pcm sine -> 16 kHz: worst interior rms error %.2g\n", worst);
}

/* The same PCM in one message, in random pieces, or in pieces with empty
 * messages gives the same output (bit-exact: speexdsp computes each output
 * sample from the same inputs and filter phase whatever the split). */
static void test_chunking(void) {
    const int cases[][3] = {{44100, 2, 0}, {48000, 1, 1}, {8000, 1, 0}, {22050, 2, 1},
                            {16000, 2, 0}, {11025, 1, 1}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        int rate = cases[c][0], ch = cases[c][1];
        sotto_encoding enc = (sotto_encoding)cases[c][2];
        size_t n = (size_t)rate * 3 + 17; /* longer than the internal chunk */
        float *x = malloc(n * (size_t)ch * sizeof *x);
        uint32_t s = 21;
        for (size_t i = 0; i < n * (size_t)ch; i++)
            x[i] = (float)(0.4 * sin(0.031 * (double)i) + 0.2 * (urand(&s) - 0.5));
        size_t len = 0, n1 = 0, n2 = 0, n3 = 0;
        unsigned char *b = pcm_bytes(enc, x, n * (size_t)ch, &len);
        sotto_err err;
        sotto_audio_in *a = sotto_audio_in_create(enc, rate, ch, &err);
        float *y1 = run_pcm(a, b, len, len / n, 0, 0, &n1);
        float *y2 = run_pcm(a, b, len, len / n, 2000, 77, &n2); /* reuses a after flush */
        sotto_audio_in_free(a);
        a = sotto_audio_in_create(enc, rate, ch, &err);
        float *y3 = run_pcm(a, b, len, len / n, 3, 78, &n3); /* many tiny and empty messages */
        CHECK_EQ_INT(n1, expect_len(n, rate));
        CHECK(n1 == n2 && n1 == n3);
        CHECK_MSG(n1 == n2 && memcmp(y1, y2, n1 * sizeof *y1) == 0,
                  "%d Hz %d ch: random pieces differ from one message", rate, ch);
        CHECK_MSG(n1 == n3 && memcmp(y1, y3, n1 * sizeof *y1) == 0,
                  "%d Hz %d ch: tiny pieces differ from one message", rate, ch);
        sotto_audio_in_stats st;
        sotto_audio_in_get_stats(a, &st);
        CHECK_EQ_INT(st.input_frames, n);
        CHECK_EQ_INT(st.output_samples, n3);
        sotto_audio_in_free(a);
        free(x);
        free(b);
        free(y1);
        free(y2);
        free(y3);
    }
}

/* Malformed PCM is rejected whole; the stream goes on as if it never came. */
static void test_reject(void) {
    const int cases[][4] = {/* enc, channels, rate, bad length */
                            {0, 1, 16000, 7},  {0, 2, 16000, 6},  {1, 1, 16000, 6},
                            {1, 2, 16000, 12}, {1, 2, 44100, 20}, {0, 1, 8000, 1},
                            {0, 2, 48000, 2},  {1, 1, 22050, 3}};
    unsigned char bad[64];
    memset(bad, 0x55, sizeof bad);
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        sotto_encoding enc = (sotto_encoding)cases[c][0];
        int ch = cases[c][1], rate = cases[c][2];
        size_t n = 800, len = 0;
        float *x = malloc(n * (size_t)ch * sizeof *x);
        for (size_t i = 0; i < n * (size_t)ch; i++) x[i] = (float)(0.3 * sin(0.05 * (double)i));
        unsigned char *b = pcm_bytes(enc, x, n * (size_t)ch, &len);
        size_t half = (n / 2) * (len / n);
        sotto_err err;
        sotto_audio_in *ref = sotto_audio_in_create(enc, rate, ch, &err);
        sotto_audio_in *a = sotto_audio_in_create(enc, rate, ch, &err);
        size_t cap = sotto_audio_in_max_out(a, len) + 8, n1 = 0, n2 = 0, k = 0, got = 0;
        float *y1 = malloc(cap * sizeof *y1), *y2 = malloc(cap * sizeof *y2);
        CHECK_EQ_INT(sotto_audio_in_push(ref, b, len, y1, cap, &n1, &err), SOTTO_OK);
        CHECK_EQ_INT(sotto_audio_in_flush(ref, y1 + n1, cap - n1, &k), SOTTO_OK);
        n1 += k;
        CHECK_EQ_INT(sotto_audio_in_push(a, b, half, y2, cap, &got, &err), SOTTO_OK);
        n2 += got;
        got = 99;
        sotto_err_clear(&err);
        int r = sotto_audio_in_push(a, bad, (size_t)cases[c][3], y2 + n2, cap - n2, &got, &err);
        CHECK_EQ_INT(r, SOTTO_E_FORMAT);
        CHECK_EQ_INT(got, 0);
        CHECK(err.code == SOTTO_E_FORMAT && strstr(err.msg, "frames") != NULL);
        sotto_audio_in_stats st;
        sotto_audio_in_get_stats(a, &st);
        CHECK_EQ_INT(st.rejected, 1);
        CHECK_EQ_INT(st.messages, 1);
        CHECK_EQ_INT(st.input_frames, n / 2);
        CHECK_EQ_INT(sotto_audio_in_push(a, b + half, len - half, y2 + n2, cap - n2, &got, &err),
                     SOTTO_OK);
        n2 += got;
        CHECK_EQ_INT(sotto_audio_in_flush(a, y2 + n2, cap - n2, &k), SOTTO_OK);
        n2 += k;
        CHECK_EQ_INT(n2, n1);
        CHECK_MSG(n1 == n2 && memcmp(y1, y2, n1 * sizeof *y1) == 0,
                  "case %zu: stream changed by a rejected message", c);
        sotto_audio_in_get_stats(a, &st);
        CHECK_EQ_INT(st.messages, 2);
        CHECK_EQ_INT(st.input_frames, n);
        CHECK_EQ_INT(st.output_samples, n1);
        /* Empty messages are accepted and produce nothing. */
        CHECK_EQ_INT(sotto_audio_in_push(a, b, 0, y2, cap, &got, &err), SOTTO_OK);
        CHECK_EQ_INT(got, 0);
        CHECK_EQ_INT(sotto_audio_in_push(a, NULL, 0, y2, cap, &got, &err), SOTTO_OK);
        CHECK_EQ_INT(got, 0);
        /* Too small an output buffer: refused, nothing consumed. */
        size_t need = sotto_audio_in_max_out(a, len);
        CHECK_EQ_INT(sotto_audio_in_push(a, b, len, y2, need - 1, &got, &err), SOTTO_E_RANGE);
        CHECK_EQ_INT(got, 0);
        sotto_audio_in_get_stats(a, &st);
        CHECK_EQ_INT(st.messages, 4);
        CHECK_EQ_INT(st.input_frames, n);
        CHECK_EQ_INT(st.rejected, 1);
        sotto_audio_in_free(ref);
        sotto_audio_in_free(a);
        free(x);
        free(b);
        free(y1);
        free(y2);
    }
}

static void test_nonfinite(void) {
    const float specials[4] = {NAN, INFINITY, -INFINITY, -NAN};
    for (int rate = 16000; rate <= 48000; rate += 32000)
        for (int ch = 1; ch <= 2; ch++) {
            size_t n = 2000;
            float *x = malloc(n * (size_t)ch * sizeof *x);
            for (size_t i = 0; i < n * (size_t)ch; i++) x[i] = (float)(0.3 * sin(0.01 * (double)i));
            size_t pos[5] = {0, 17, 500, 1001, 1999}, nbad = 0;
            for (size_t i = 0; i < 5; i++) {
                x[pos[i] * (size_t)ch] = specials[i % 4];
                nbad++;
            }
            size_t len = 0, ny = 0;
            unsigned char *b = pcm_bytes(SOTTO_ENCODING_PCM_F32LE, x, n * (size_t)ch, &len);
            sotto_err err;
            sotto_audio_in *a = sotto_audio_in_create(SOTTO_ENCODING_PCM_F32LE, rate, ch, &err);
            float *y = run_pcm(a, b, len, len / n, 100, 3, &ny);
            int finite = 1;
            for (size_t i = 0; i < ny; i++) finite &= isfinite(y[i]) != 0;
            CHECK(finite);
            CHECK_EQ_INT(ny, expect_len(n, rate));
            sotto_audio_in_stats st;
            sotto_audio_in_get_stats(a, &st);
            CHECK_EQ_INT(st.nonfinite, nbad);
            if (rate == 16000)
                for (size_t i = 0; i < 5; i++) {
                    size_t p = pos[i];
                    float other = ch == 2 ? 0.5f * x[p * 2 + 1] : 0.0f;
                    CHECK_MSG(y[p] == other, "sample %zu: %g, want %g", p, y[p], other);
                }
            free(x);
            free(b);
            free(y);
            sotto_audio_in_free(a);
        }
}

/* ---- Opus ---- */

#define T_SECS 1.2 /* a whole number of every frame size */

static double chirp(double t) {
    const double f0 = 200.0, f1 = 3000.0;
    return 0.5 * sin(2.0 * M_PI * (f0 * t + (f1 - f0) * t * t / (2.0 * T_SECS)));
}

/* Normalized cross-correlation of y[k + lag] and ref[k] over [from, to). */
static double xcorr(const float *y, size_t ny, const double *ref, size_t from, size_t to,
                    size_t lag) {
    double sxy = 0, sxx = 0, syy = 0;
    for (size_t k = from; k < to && k + lag < ny; k++) {
        sxy += y[k + lag] * ref[k];
        sxx += ref[k] * ref[k];
        syy += (double)y[k + lag] * y[k + lag];
    }
    return sxx > 0 && syy > 0 ? sxy / sqrt(sxx * syy) : 0.0;
}

/* Encodes the chirp with libopus (rate, channels, application, frame size
 * in tenths of ms), pushes each packet, flushes; checks lengths; returns the
 * best correlation with the 16 kHz chirp, its lag and the encoder lookahead
 * in 16 kHz samples. */
static double opus_case(int rate, int ch, int app, int tenths, int *best_lag, double *look16) {
    int oerr = 0, fs = rate * tenths / 10000, n_pk = (int)(T_SECS * 10000 / tenths + 0.5);
    OpusEncoder *enc = opus_encoder_create(rate, ch, app, &oerr);
    CHECK(enc != NULL);
    if (!enc) return 0.0;
    /* 64 kb/s per channel: libopus 1.3.1's stereo encoder at 2.5 ms and a
     * total of 64 kb/s gives only ~0.5 correlation even through a stereo
     * decoder (an encoder matter, not a decoding one). */
    opus_encoder_ctl(enc, OPUS_SET_BITRATE(64000 * ch));
    opus_encoder_ctl(enc, OPUS_SET_COMPLEXITY(5));
    opus_int32 look = 0;
    opus_encoder_ctl(enc, OPUS_GET_LOOKAHEAD(&look));
    *look16 = (double)look * 16000.0 / rate;
    sotto_err err;
    sotto_audio_in *a = sotto_audio_in_create(SOTTO_ENCODING_OPUS, rate, ch, &err);
    size_t ny = 0, total = (size_t)(T_SECS * 16000 + 0.5), room = total + 4000;
    float *y = malloc(room * sizeof *y), *pcm = malloc((size_t)(fs * ch) * sizeof *pcm);
    unsigned char pkt[4000];
    for (int p = 0; p < n_pk; p++) {
        for (int i = 0; i < fs; i++) {
            double t = (double)(p * fs + i) / rate, v = chirp(t);
            for (int c = 0; c < ch; c++) pcm[i * ch + c] = (float)(c ? 0.8 * v : 1.2 * v);
        }
        int len = opus_encode_float(enc, pcm, fs, pkt, (opus_int32)sizeof pkt);
        CHECK(len > 0);
        if (len <= 0) break;
        CHECK_EQ_INT(opus_packet_get_nb_samples(pkt, len, 48000), tenths * 48 / 10);
        size_t got = 0, cap = sotto_audio_in_max_out(a, (size_t)len);
        CHECK(ny + cap <= room);
        CHECK_EQ_INT(sotto_audio_in_push(a, pkt, (size_t)len, y + ny, cap, &got, &err), SOTTO_OK);
        ny += got;
    }
    size_t tail = 0;
    CHECK_EQ_INT(sotto_audio_in_flush(a, y + ny, room - ny, &tail), SOTTO_OK);
    ny += tail;
    CHECK_MSG(ny == total, "opus %d Hz %d ch %.1f ms: %zu samples, want %zu", rate, ch,
              tenths / 10.0, ny, total);
    sotto_audio_in_stats st;
    sotto_audio_in_get_stats(a, &st);
    CHECK_EQ_INT(st.input_frames, (uint64_t)n_pk * (uint64_t)(tenths * 48 / 10));
    CHECK_EQ_INT(st.output_samples, total);
    CHECK_EQ_INT(st.messages, n_pk);
    CHECK_EQ_INT(st.bad_packets, 0);
    CHECK_EQ_INT(st.concealed, 0);
    double *ref = malloc(total * sizeof *ref);
    for (size_t k = 0; k < total; k++) ref[k] = chirp((double)k / 16000.0);
    double best = -1.0;
    *best_lag = -1;
    for (size_t lag = 0; lag < 320; lag++) { /* up to 20 ms */
        double c = xcorr(y, ny, ref, 320, total - 1000, lag);
        if (c > best) {
            best = c;
            *best_lag = (int)lag;
        }
    }
    free(ref);
    free(y);
    free(pcm);
    opus_encoder_destroy(enc);
    sotto_audio_in_free(a);
    return best;
}

static void test_opus_roundtrip(void) {
    const int tenths[] = {25, 50, 100, 200, 400, 600, 1200};
    const int rates[] = {48000, 16000, 8000};
    const int apps[] = {OPUS_APPLICATION_VOIP, OPUS_APPLICATION_AUDIO};
    double worst = 2.0;
    int lag_min = 1 << 30, lag_max = -1;
    for (size_t r = 0; r < 3; r++)
        for (int ch = 1; ch <= 2; ch++)
            for (size_t ap = 0; ap < 2; ap++)
                for (size_t f = 0; f < sizeof tenths / sizeof tenths[0]; f++) {
                    int lag = -1;
                    double look16 = 0;
                    double c = opus_case(rates[r], ch, apps[ap], tenths[f], &lag, &look16);
                    CHECK_MSG(c > 0.9, "opus %d Hz %d ch %s %.1f ms: correlation %.3f", rates[r],
                              ch, ap ? "audio" : "voip", tenths[f] / 10.0, c);
                    /* The decoded audio lags by the encoder's lookahead. */
                    CHECK_MSG(fabs(lag - look16) <= 2.0,
                              "opus %d Hz %d ch %.1f ms: delay %d samples, lookahead %.1f",
                              rates[r], ch, tenths[f] / 10.0, lag, look16);
                    worst = fmin(worst, c);
                    lag_min = lag < lag_min ? lag : lag_min;
                    lag_max = lag > lag_max ? lag : lag_max;
                }
    fprintf(stderr,
            "opus -> 16 kHz: worst correlation with the source %.4f; delay %d..%d samples "
            "at 16 kHz\n",
            worst, lag_min, lag_max);
}

/* Pushes one message; returns the 48 kHz samples it added and checks that
 * its output is finite and within max_out. */
static uint64_t opus_push(sotto_audio_in *a, const void *p, size_t len, float *y, size_t *ny) {
    sotto_audio_in_stats before, after;
    sotto_audio_in_get_stats(a, &before);
    size_t cap = sotto_audio_in_max_out(a, len), got = 0;
    sotto_err err;
    CHECK_EQ_INT(sotto_audio_in_push(a, p, len, y + *ny, cap, &got, &err), SOTTO_OK);
    int finite = 1;
    for (size_t i = 0; i < got; i++) finite &= isfinite(y[*ny + i]) != 0;
    CHECK(finite);
    CHECK(got <= cap);
    *ny += got;
    sotto_audio_in_get_stats(a, &after);
    return after.input_frames - before.input_frames;
}

static void test_opus_garbage(void) {
    int oerr = 0;
    const int fs = 960, n_pk = 100;
    OpusEncoder *enc = opus_encoder_create(48000, 1, OPUS_APPLICATION_AUDIO, &oerr);
    OpusEncoder *enc120 = opus_encoder_create(48000, 1, OPUS_APPLICATION_AUDIO, &oerr);
    if (!enc || !enc120) {
        CHECK(0);
        return;
    }
    opus_encoder_ctl(enc, OPUS_SET_BITRATE(48000));
    opus_encoder_ctl(enc120, OPUS_SET_BITRATE(48000));
    unsigned char pk[100][1500], big[6000];
    int pl[100];
    float pcm[5760];
    for (int p = 0; p < n_pk; p++) {
        for (int i = 0; i < fs; i++)
            pcm[i] = (float)(0.4 * sin(2.0 * M_PI * 440.0 * (p * fs + i) / 48000.0) +
                             0.2 * sin(2.0 * M_PI * 1234.0 * (p * fs + i) / 48000.0));
        pl[p] = opus_encode_float(enc, pcm, fs, pk[p], 1500);
        CHECK(pl[p] > 1);
    }
    for (int i = 0; i < 5760; i++) pcm[i] = (float)(0.4 * sin(0.05 * i));
    int big_len = opus_encode_float(enc120, pcm, 5760, big, (opus_int32)sizeof big);
    CHECK(big_len > 10);
    sotto_err err;
    /* Clean decode of all packets: the reference. */
    sotto_audio_in *a = sotto_audio_in_create(SOTTO_ENCODING_OPUS, 48000, 1, &err);
    size_t cap = 200000, n_clean = 0, ny = 0, k = 0;
    float *clean = malloc(cap * sizeof *clean), *y = malloc(cap * sizeof *y);
    for (int p = 0; p < n_pk; p++) opus_push(a, pk[p], (size_t)pl[p], clean, &n_clean);
    CHECK_EQ_INT(sotto_audio_in_flush(a, clean + n_clean, 4000, &k), SOTTO_OK);
    n_clean += k;
    CHECK_EQ_INT(n_clean, n_pk * fs / 3);
    sotto_audio_in_free(a);

    /* A fresh decoder's first packet lost: 20 ms of concealment. */
    a = sotto_audio_in_create(SOTTO_ENCODING_OPUS, 16000, 1, &err);
    CHECK_EQ_INT(opus_push(a, "", 0, y, &ny), 960);
    sotto_audio_in_stats st;
    sotto_audio_in_get_stats(a, &st);
    CHECK(st.bad_packets == 1 && st.concealed == 960 && st.messages == 1);
    /* After a 120 ms packet, a loss conceals 120 ms. */
    CHECK_EQ_INT(opus_push(a, big, (size_t)big_len, y, &ny), 5760);
    CHECK_EQ_INT(opus_push(a, NULL, 0, y, &ny), 5760);
    /* A truncated multi-frame packet is malformed. */
    CHECK(opus_packet_parse(big, big_len / 2, (unsigned char[1]){0}, (const unsigned char *[48]){0},
                            (opus_int16[48]){0}, (int[1]){0}) < 0);
    CHECK_EQ_INT(opus_push(a, big, (size_t)big_len / 2, y, &ny), 5760);
    sotto_audio_in_get_stats(a, &st);
    CHECK_EQ_INT(st.bad_packets, 3);
    CHECK_EQ_INT(st.concealed, 960 + 2 * 5760); /* the valid 120 ms packet is not */
    sotto_audio_in_free(a);

    /* Valid packets, garbage, valid packets. */
    ny = 0;
    a = sotto_audio_in_create(SOTTO_ENCODING_OPUS, 48000, 1, &err);
    for (int p = 0; p < 10; p++) CHECK_EQ_INT(opus_push(a, pk[p], (size_t)pl[p], y, &ny), fs);
    uint32_t s = 1234;
    unsigned char *junk = malloc(100000);
    for (size_t i = 0; i < 100000; i++) junk[i] = (unsigned char)lcg(&s);
    const unsigned char one_ff[1] = {0xFF};                       /* code 3, no count byte */
    const unsigned char count0[2] = {(unsigned char)((pk[0][0] & 0xFC) | 3), 0}; /* 0 frames */
    const unsigned char count63[2] = {(16 << 3) | 3, 63};        /* 63 x 2.5 ms > 120 ms */
    const unsigned char code2[3] = {(unsigned char)((pk[0][0] & 0xFC) | 2), 200, 1}; /* length past end */
    const unsigned char dtx[1] = {(unsigned char)(pk[0][0] & 0xFC)}; /* TOC only: DTX */
    struct {
        const void *p;
        size_t len;
        int bad;
    } items[] = {{junk, 0, 1},       {NULL, 0, 1},          {junk, 100000, 1},
                 {junk, 61201, 1},   {one_ff, 1, 1},        {count0, 2, 1},
                 {count63, 2, 1},    {code2, 3, 1},         {big, (size_t)big_len / 2, 1},
                 {dtx, 1, 0}};
    uint64_t bad = 0, conc = 0;
    for (size_t i = 0; i < sizeof items / sizeof items[0]; i++) {
        CHECK_EQ_INT(opus_push(a, items[i].p, items[i].len, y, &ny), fs);
        bad += (uint64_t)items[i].bad;
        conc += (uint64_t)fs;
        sotto_audio_in_get_stats(a, &st);
        CHECK_MSG(st.bad_packets == bad && st.concealed == conc, "item %zu: bad %llu concealed %llu",
                  i, (unsigned long long)st.bad_packets, (unsigned long long)st.concealed);
    }
    /* A truncated single-frame packet and random bytes: either decoded (any
     * parseable packet is) or concealed; never a crash. */
    opus_push(a, pk[10], (size_t)pl[10] / 2, y, &ny);
    for (int i = 0; i < 200; i++) {
        size_t len = 1 + lcg(&s) % 400;
        for (size_t j = 0; j < len; j++) junk[j] = (unsigned char)lcg(&s);
        opus_push(a, junk, len, y, &ny);
    }
    sotto_audio_in_get_stats(a, &st);
    uint64_t shift48 = st.input_frames - 10 * (uint64_t)fs;
    fprintf(stderr, "opus garbage: %llu of %llu messages concealed as bad\n",
            (unsigned long long)st.bad_packets, (unsigned long long)st.messages);
    for (int p = 10; p < n_pk; p++) CHECK_EQ_INT(opus_push(a, pk[p], (size_t)pl[p], y, &ny), fs);
    CHECK_EQ_INT(sotto_audio_in_flush(a, y + ny, 4000, &k), SOTTO_OK);
    ny += k;
    sotto_audio_in_get_stats(a, &st);
    CHECK_EQ_INT(ny, st.input_frames / 3);
    CHECK_EQ_INT(st.output_samples, ny);
    /* From the second valid packet after the garbage on, the decode matches
     * the clean run, shifted by the time the garbage took. */
    CHECK_EQ_INT(shift48 % 3, 0);
    size_t shift = (size_t)(shift48 / 3), from = 12 * 320, to = n_clean - 200;
    double sxy = 0, sxx = 0, syy = 0;
    for (size_t i = from; i < to; i++) {
        sxy += (double)clean[i] * y[i + shift];
        sxx += (double)clean[i] * clean[i];
        syy += (double)y[i + shift] * y[i + shift];
    }
    double c = sxy / sqrt(sxx * syy + 1e-30);
    CHECK_MSG(c > 0.99, "after garbage: correlation with the clean decode %.4f", c);
    fprintf(stderr, "opus after garbage: correlation with the clean decode %.5f\n", c);
    free(junk);
    free(clean);
    free(y);
    sotto_audio_in_free(a);
    opus_encoder_destroy(enc);
    opus_encoder_destroy(enc120);
}

int main(void) {
    test_names_and_params();
    test_16k_exact();
    test_resampled_sine();
    test_chunking();
    test_reject();
    test_nonfinite();
    test_opus_roundtrip();
    test_opus_garbage();
    return check_report();
}
