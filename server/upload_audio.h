/* upload_audio.h - uploaded audio files (any format: WAV through sotto's own
 * reader, the rest through libsndfile) to 16 kHz mono float, bounded.
 *
 * Bounds: sample rates outside SOTTO_AUDIO_MIN_RATE..SOTTO_AUDIO_MAX_RATE
 * (8..384 kHz) and more than 32 channels are refused (SOTTO_E_UNSUPPORTED);
 * audio longer than max_seconds fails with SOTTO_E_RANGE. A declared length
 * (WAV data chunk, libsndfile's frame count) is checked before anything is
 * decoded; formats whose length is unknown or wrong are decoded in chunks,
 * straight into the 16 kHz output, and stop at the cap, so memory stays
 * within about max_seconds * 16000 floats beyond the file itself.
 */
#ifndef SOTTO_UPLOAD_AUDIO_H
#define SOTTO_UPLOAD_AUDIO_H

#include "sotto_err.h"

#include <stddef.h>

/* *out is malloc'd (the caller frees it); max_seconds <= 0: the default cap
 * of srv_decode_upload (4 h). */
int srv_decode_upload_max(const void *data, size_t len, double max_seconds, float **out,
                          size_t *n, sotto_err *err);

#endif
