/* silero_probs.c - Silero VAD speech probabilities of a WAV file, one line
 * per 512-sample chunk (for tests/ref/test_silero_ref.py), and its speed.
 *
 * usage: silero_probs MODEL.safetensors FILE.wav         probabilities
 *        silero_probs --bench MODEL.safetensors FILE.wav  time per chunk
 *
 * The WAV is read as 16 kHz mono (resampled if needed, include/audio.h).
 * Chunks are consecutive, from sample 0, with state carried from chunk to
 * chunk; a last partial chunk is zero-padded to 512 samples (as silero's
 * get_speech_timestamps does). Probabilities are printed with %.9g.
 * --bench runs the file's chunks repeatedly for at least 2 s on one thread
 * and prints microseconds per chunk (mean and best pass) to stdout.
 * Exit status: 0, or 1 on any error.
 */
#define _POSIX_C_SOURCE 200809L
#include "audio.h"
#include "silero.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int main(int argc, char **argv) {
    int bench = 0, a = 1;
    if (a < argc && strcmp(argv[a], "--bench") == 0) bench = 1, a++;
    if (argc - a != 2) {
        fprintf(stderr, "usage: %s [--bench] MODEL.safetensors FILE.wav\n", argv[0]);
        return 1;
    }
    sotto_err err = {0};
    sotto_silero_model *m = sotto_silero_load(argv[a], &err);
    if (!m) {
        fprintf(stderr, "silero_probs: %s\n", err.msg);
        return 1;
    }
    sotto_audio au = {0};
    if (sotto_audio_load_16k(argv[a + 1], &au, &err) != SOTTO_OK) {
        fprintf(stderr, "silero_probs: %s\n", err.msg);
        sotto_silero_model_free(m);
        return 1;
    }
    sotto_silero *s = sotto_silero_create(m, &err);
    if (!s) {
        fprintf(stderr, "silero_probs: %s\n", err.msg);
        sotto_audio_free(&au);
        sotto_silero_model_free(m);
        return 1;
    }
    size_t nch = (au.n + SOTTO_SILERO_CHUNK - 1) / SOTTO_SILERO_CHUNK;
    size_t cap = nch ? nch * SOTTO_SILERO_CHUNK : 1; /* >= au.n */
    float *x = calloc(cap, sizeof *x);
    if (!x) {
        fprintf(stderr, "silero_probs: out of memory\n");
        return 1;
    }
    memcpy(x, au.samples, (au.n < cap ? au.n : cap) * sizeof *x);
    if (!bench) {
        for (size_t c = 0; c < nch; c++)
            printf("%.9g\n", (double)sotto_silero_process(s, x + c * SOTTO_SILERO_CHUNK));
    } else if (nch > 0) {
        double t_all = 0.0, best = 1e30;
        size_t n_all = 0;
        volatile float sink = 0.0f;
        while (t_all < 2.0) {
            sotto_silero_reset(s);
            double t0 = now_s();
            for (size_t c = 0; c < nch; c++)
                sink += sotto_silero_process(s, x + c * SOTTO_SILERO_CHUNK);
            double dt = now_s() - t0;
            t_all += dt;
            n_all += nch;
            if (dt / (double)nch < best) best = dt / (double)nch;
        }
        printf("silero_probs: %zu chunks x %zu passes: %.1f us/chunk mean, %.1f us best pass "
               "(%.0fx real time)\n",
               nch, n_all / nch, 1e6 * t_all / (double)n_all, 1e6 * best,
               0.032 / (t_all / (double)n_all));
        (void)sink;
    }
    free(x);
    sotto_silero_free(s);
    sotto_audio_free(&au);
    sotto_silero_model_free(m);
    return 0;
}
