/* mel.h - Whisper's log-mel spectrogram front end.
 *
 * 16 kHz input, n_fft 400 (25 ms), hop 160 (10 ms), periodic Hann window,
 * reflect padding of n_fft/2 on both sides ("center"), power spectrum,
 * Slaney-normalised mel filter bank (librosa's "slaney" mel scale, 0-8 kHz),
 * log10(max(x, 1e-10)), floor at (global max - 8), then (x + 4) / 4.
 * This is exactly what faster-whisper's FeatureExtractor computes.
 *
 * A sotto_mel holds the precomputed filters, window and FFT tables for one
 * n_mels value (80 or 128). It is immutable after creation and may be shared
 * by threads; sotto_mel_compute() allocates its own scratch.
 */
#ifndef SOTTO_MEL_H
#define SOTTO_MEL_H

#include "sotto_err.h"

#include <stddef.h>

#define SOTTO_SAMPLE_RATE 16000
#define SOTTO_N_FFT 400
#define SOTTO_HOP 160
#define SOTTO_CHUNK_SECONDS 30
#define SOTTO_N_SAMPLES (SOTTO_SAMPLE_RATE * SOTTO_CHUNK_SECONDS) /* 480000 */
#define SOTTO_N_FRAMES (SOTTO_N_SAMPLES / SOTTO_HOP)              /* 3000 */

typedef struct sotto_mel sotto_mel;

/* n_mels: number of mel bins (from the model: 80 or 128; any 1..256 works). */
sotto_mel *sotto_mel_create(int n_mels, sotto_err *err);
void sotto_mel_free(sotto_mel *mel); /* accepts NULL */
int sotto_mel_n_mels(const sotto_mel *mel);

/* Log-mel spectrogram of `n` samples with `pad` zero samples appended first
 * (faster-whisper uses pad = 160; OpenAI Whisper uses pad = 480000).
 * On success *out is a malloc'd row-major [n_mels][*n_frames] array (caller
 * frees) with *n_frames = (n + pad) / 160. The max-8 floor is taken over
 * the whole output. n + pad must be >= 1. n_threads <= 0 means "all". */
int sotto_mel_compute(const sotto_mel *mel, const float *samples, size_t n, size_t pad,
                      int n_threads, float **out, size_t *n_frames, sotto_err *err);

/* The filter bank as a row-major [n_mels][n_fft/2 + 1] array (for tests and
 * for uploading to other backends). */
const float *sotto_mel_filters(const sotto_mel *mel);

#endif
