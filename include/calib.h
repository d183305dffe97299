/* calib.h - activation statistics that guide 4-bit quantization.
 *
 * A calibration file is a safetensors file with, for each linear weight of
 * one model, the mean square of each of its input columns over some audio:
 * tensor "<canonical weight name>" (e.g. "enc.0.fc1.w", "dec.emb"), F32
 * [cols]. Its __metadata__ holds "sotto_calib" = "1", "model" (the
 * dimensions it was recorded with, "mels 80 width 384 layers 4+4 vocab
 * 51864") and "clips": a JSON list of the audio files it was recorded from,
 * each {"file": basename, "bytes": size, "crc32": "%08x"} so that an
 * evaluation can refuse clips that were also used for calibration.
 *
 * The 4-bit quantizers weight each column's squared error by its entry
 * (quant.h's sotto_quant_opts.importance): an error on a column that carries
 * large activations costs more output error than one on a quiet column.
 *
 * Recording: sotto_calib_rec_start() installs a linear-layer observer
 * (linear.h) for one model; every sotto_linear call on that model's weights
 * from then on adds to the sums, until sotto_calib_rec_free().
 */
#ifndef SOTTO_CALIB_H
#define SOTTO_CALIB_H

#include "sotto_err.h"

#include <stddef.h>
#include <stdint.h>

struct sotto_model;

/* ---- reading ---------------------------------------------------------------- */

typedef struct sotto_calib sotto_calib;

/* Loads a calibration file; NULL with err set on a missing, damaged or
 * foreign file. The values are normalized per tensor: divided by their
 * mean, plus a floor of 0.01 so that no column's error is ignored. */
sotto_calib *sotto_calib_load(const char *path, sotto_err *err);
void sotto_calib_free(sotto_calib *c); /* accepts NULL */

/* The importance vector of weight `name` if it has exactly `cols` entries,
 * else NULL. Owned by c. */
const float *sotto_calib_get(const sotto_calib *c, const char *name, int64_t cols);

/* The "model" string it was recorded with, and its path. */
const char *sotto_calib_model(const sotto_calib *c);
const char *sotto_calib_path(const sotto_calib *c);

/* "mels 80 width 384 layers 4+4 vocab 51864" for m into buf. */
void sotto_calib_model_string(const struct sotto_model *m, char *buf, size_t bufsz);

/* ---- recording ---------------------------------------------------------------- */

typedef struct sotto_calib_rec sotto_calib_rec;

/* Starts recording the inputs of m's linear layers (m is borrowed and must
 * outlive the recorder). Only one recorder may exist at a time
 * (SOTTO_E_INVALID otherwise). */
sotto_calib_rec *sotto_calib_rec_start(const struct sotto_model *m, sotto_err *err);

/* Notes an audio file the statistics include (for the overlap check). */
int sotto_calib_rec_add_clip(sotto_calib_rec *r, const char *file, size_t bytes, uint32_t crc32,
                             sotto_err *err);

/* Rows seen so far by weight `name` (0 if none or unknown). */
int64_t sotto_calib_rec_rows(const sotto_calib_rec *r, const char *name);

/* Writes the file. SOTTO_E_INVALID if some linear weight saw no input. */
int sotto_calib_rec_save(const sotto_calib_rec *r, const char *path, sotto_err *err);

/* Stops recording and frees; accepts NULL. */
void sotto_calib_rec_free(sotto_calib_rec *r);

#endif
