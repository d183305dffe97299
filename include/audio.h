/* audio.h - audio buffers, WAV file reading/writing, and loading any WAV as
 * 16 kHz mono float for the engine.
 *
 * WAV support: RIFF/WAVE (and RF64 is rejected with a clear error),
 * WAVE_FORMAT_PCM 8/16/24/32-bit, WAVE_FORMAT_IEEE_FLOAT 32/64-bit and
 * WAVE_FORMAT_EXTENSIBLE wrapping either; any sample rate 8000..384000
 * (SOTTO_AUDIO_MIN_RATE..SOTTO_AUDIO_MAX_RATE); any channel count 1..32
 * (downmixed to mono by averaging). Samples become
 * float in [-1, 1): int16 / 32768, etc. Truncated or malformed files fail
 * with SOTTO_E_FORMAT and a message naming the file and the problem; a
 * data chunk that runs past the end of the file is accepted up to the last
 * whole frame (with a warning logged), as many recorders write them.
 * Duration is bounded: a file holding more than max_seconds of audio
 * (SOTTO_AUDIO_MAX_SECONDS unless given) fails with SOTTO_E_RANGE before
 * any sample buffer is allocated.
 *
 * Ownership: a sotto_audio owns `samples` (malloc'd); free it with
 * sotto_audio_free().
 */
#ifndef SOTTO_AUDIO_H
#define SOTTO_AUDIO_H

#include "sotto_err.h"

#include <stddef.h>

/* Bounds on every decoder's input (WAV here; the server's uploads too). */
#define SOTTO_AUDIO_MIN_RATE 8000
#define SOTTO_AUDIO_MAX_RATE 384000
#define SOTTO_AUDIO_MAX_SECONDS (12 * 3600.0) /* the default duration cap */

typedef struct sotto_audio {
    float *samples;     /* mono, n samples */
    size_t n;
    int sample_rate;    /* Hz */
    int channels_in;    /* channel count of the source before downmix */
} sotto_audio;

void sotto_audio_free(sotto_audio *a); /* frees samples, zeroes the struct; accepts NULL */

/* Reads a WAV file / an in-memory WAV image into mono float at its own rate.
 * `name` is used in error messages only. */
int sotto_wav_read(const char *path, sotto_audio *out, sotto_err *err);
int sotto_wav_read_mem(const void *data, size_t len, const char *name, sotto_audio *out,
                       sotto_err *err);
/* The same with a duration cap in seconds (<= 0: SOTTO_AUDIO_MAX_SECONDS). */
int sotto_wav_read_mem_max(const void *data, size_t len, const char *name, double max_seconds,
                           sotto_audio *out, sotto_err *err);

/* Writes mono 16-bit PCM (samples clipped to [-1, 1]). */
int sotto_wav_write_s16(const char *path, const float *samples, size_t n, int sample_rate,
                        sotto_err *err);

/* Reads a WAV file and returns it as mono float at 16 kHz (resampled with
 * speexdsp when the file has another rate). */
int sotto_audio_load_16k(const char *path, sotto_audio *out, sotto_err *err);

#endif
