/* silero.h - the Silero VAD v5/v6 network (16 kHz) in plain C.
 *
 * The weights come from the ONNX model of the `silero-vad` package,
 * converted once at set-up time to safetensors by scripts/convert_silero.py
 * (scripts/fetch_silero.sh -> models/silero_vad/silero_vad.safetensors);
 * no Python runs at run time.
 *
 * Per chunk of SOTTO_SILERO_CHUNK = 512 samples (32 ms at 16 kHz), with the
 * last 64 samples of the previous chunk in front of it (zeros after create
 * or reset), as silero's own OnnxWrapper frames the audio:
 *   576 samples, reflect-padded by 64 on the right -> 640;
 *   front end: conv1d with a fixed 258 x 256 basis, stride 128 (4 frames),
 *              magnitude of channels [0, 129) (real) and [129, 258) (imag.);
 *   encoder:   4 conv1d k3 pad 1 + ReLU, 129 -> 128 -> 64 -> 64 -> 128
 *              channels, strides 1, 2, 2, 1 (4 -> 4 -> 2 -> 1 -> 1 frames);
 *   LSTM cell: 128 hidden, state (h, c) carried from chunk to chunk;
 *   output:    ReLU, 1x1 conv 128 -> 1, sigmoid = speech probability.
 * Matches onnxruntime on the original model to ~1e-6 (tests/ref/).
 *
 * Ownership and threads: a sotto_silero_model is read-only after load and
 * may be shared by any number of streams and threads; it must outlive every
 * sotto_silero made from it. A sotto_silero (one per audio stream) holds
 * the LSTM state, the 64-sample context and scratch; it is not thread-safe.
 * sotto_silero_process does not allocate. About 0.1 ms per chunk on one
 * core (x86-64 AVX2; bench/silero_probs.c --bench).
 */
#ifndef SOTTO_SILERO_H
#define SOTTO_SILERO_H

#include "sotto_err.h"

#define SOTTO_SILERO_CHUNK 512   /* samples per call (16 kHz) */
#define SOTTO_SILERO_CONTEXT 64  /* samples of the previous chunk seen by the next */
#define SOTTO_SILERO_RATE 16000

typedef struct sotto_silero_model sotto_silero_model;

/* Loads a file written by scripts/convert_silero.py. Every tensor's name,
 * dtype (F32) and shape is checked, and every value must be finite; a
 * missing, extra, misshapen or truncated tensor, or another format, fails
 * with SOTTO_E_FORMAT (SOTTO_E_IO / SOTTO_E_NOTFOUND for the file itself)
 * and a message naming the file and the tensor. Returns NULL on failure. */
sotto_silero_model *sotto_silero_load(const char *path, sotto_err *err);
void sotto_silero_model_free(sotto_silero_model *m); /* accepts NULL */

typedef struct sotto_silero sotto_silero;

/* A stream over model m (borrowed), in the reset state. NULL on failure. */
sotto_silero *sotto_silero_create(const sotto_silero_model *m, sotto_err *err);
void sotto_silero_free(sotto_silero *s); /* accepts NULL */

/* Back to the state after create: LSTM state and context zeroed. */
void sotto_silero_reset(sotto_silero *s);

/* Speech probability (0..1) of the next 512 samples (16 kHz, float in
 * [-1, 1]); advances the state. Non-finite samples count as 0. */
float sotto_silero_process(sotto_silero *s, const float chunk[SOTTO_SILERO_CHUNK]);

#endif
