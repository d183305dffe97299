/* vad_neural.h - internal to vad/: the per-chunk speech decisions of the
 * SOTTO_VAD_SILERO kind of sotto_vad (vad.c runs the endpointer on them).
 *
 * Decision with hysteresis, as silero's get_speech_timestamps does with
 * threshold / neg_threshold: a chunk is speech if its probability is
 * >= speech_threshold, or >= neg_threshold while the previous chunk was
 * speech or an utterance is open. The probabilities of the last
 * SOTTO_VAD_NEURAL_HIST chunks are kept.
 */
#ifndef SOTTO_VAD_NEURAL_H
#define SOTTO_VAD_NEURAL_H

#include "silero.h"
#include "vad.h"

#include <stdint.h>

#define SOTTO_VAD_NEURAL_HIST 4096

typedef struct sotto_vad_neural sotto_vad_neural;

/* p->kind must be SOTTO_VAD_SILERO with p->silero set (checked by the caller). */
sotto_vad_neural *sotto_vad_neural_create(const sotto_vad_params *p, sotto_err *err);
void sotto_vad_neural_free(sotto_vad_neural *n); /* accepts NULL */

/* Classifies chunk number `frame` (512 samples, frames in order from 0):
 * returns 1 for speech, 0 for not. */
int sotto_vad_neural_frame(sotto_vad_neural *n, const float chunk[SOTTO_SILERO_CHUNK],
                           uint64_t frame, int in_speech);

/* Probability of chunk `frame` if it is among the last HIST classified
 * ones (n_frames = chunks classified so far), else -1. */
float sotto_vad_neural_prob(const sotto_vad_neural *n, uint64_t frame, uint64_t n_frames);

#endif
