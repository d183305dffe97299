/* audio_in.h - decoding a session's incoming audio messages into 16 kHz
 * mono float, the engine's input.
 *
 * Encodings (declared by the session's `start` message):
 *   pcm_s16le  interleaved 16-bit little-endian PCM, 1 or 2 channels
 *   pcm_f32le  interleaved 32-bit float little-endian PCM, 1 or 2 channels
 *   opus       one raw Opus packet per message (any legal frame size,
 *              2.5 to 120 ms), decoded by libopus at 48 kHz
 * Any declared rate from 8000 to 48000 Hz (for opus, the rate describes the
 * source and is informational: packets always decode at 48 kHz). Stereo is
 * downmixed by averaging. Resampling to 16 kHz uses speexdsp's streaming
 * resampler, delay-compensated (include/resample.h).
 *
 * Bad input never crashes and never loses audio already accepted:
 *   - PCM messages whose length is not a whole number of frames are
 *     rejected whole (SOTTO_E_FORMAT, nothing consumed);
 *   - float samples that are NaN/Inf are replaced by 0 and counted;
 *   - an Opus packet libopus rejects is replaced by packet-loss concealment
 *     of the previous packet's duration (20 ms if none) and counted.
 *
 * Ownership: the caller owns output buffers. One sotto_audio_in per
 * session; not thread-safe (the gateway's service thread uses it).
 */
#ifndef SOTTO_AUDIO_IN_H
#define SOTTO_AUDIO_IN_H

#include "sotto_err.h"

#include <stddef.h>
#include <stdint.h>

typedef enum sotto_encoding {
    SOTTO_ENCODING_PCM_S16LE = 0,
    SOTTO_ENCODING_PCM_F32LE,
    SOTTO_ENCODING_OPUS
} sotto_encoding;

/* "pcm_s16le" | "pcm_f32le" | "opus" -> encoding; 0 or SOTTO_E_INVALID. */
int sotto_encoding_parse(const char *name, sotto_encoding *out);
const char *sotto_encoding_name(sotto_encoding enc);

typedef struct sotto_audio_in sotto_audio_in;

typedef struct sotto_audio_in_stats {
    uint64_t messages;        /* messages accepted */
    uint64_t rejected;        /* messages rejected whole (malformed PCM) */
    uint64_t input_frames;    /* PCM: frames (samples per channel) accepted at the
                                 input rate; opus: 48 kHz samples decoded */
    uint64_t output_samples;  /* 16 kHz samples produced so far */
    uint64_t bad_packets;     /* opus packets replaced by concealment */
    uint64_t concealed;       /* 48 kHz samples produced by concealment */
    uint64_t nonfinite;       /* float samples that were NaN/Inf */
} sotto_audio_in_stats;

/* sample_rate 8000..48000, channels 1 or 2. NULL + err (SOTTO_E_INVALID
 * naming the bad parameter) on failure. */
sotto_audio_in *sotto_audio_in_create(sotto_encoding enc, int sample_rate, int channels,
                                      sotto_err *err);
void sotto_audio_in_free(sotto_audio_in *a); /* accepts NULL */

/* Upper bound of the 16 kHz samples one message of len bytes can produce. */
size_t sotto_audio_in_max_out(const sotto_audio_in *a, size_t len);

/* Decodes one message and writes the 16 kHz samples it yields (possibly 0:
 * the resampler holds a few) to out (cap >= sotto_audio_in_max_out(len)).
 * Returns 0 (also for concealed opus packets: see stats), SOTTO_E_FORMAT
 * with a message for a rejected message, SOTTO_E_RANGE if cap is too small. */
int sotto_audio_in_push(sotto_audio_in *a, const void *data, size_t len, float *out, size_t cap,
                        size_t *n_out, sotto_err *err);

/* End of stream: emits the samples still held by the resampler. */
int sotto_audio_in_flush(sotto_audio_in *a, float *out, size_t cap, size_t *n_out);

void sotto_audio_in_get_stats(const sotto_audio_in *a, sotto_audio_in_stats *st);

#endif
