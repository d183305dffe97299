/* snapshot.h - pre-quantized model snapshots ("sotto quantize").
 *
 * A snapshot is a Hugging Face-style directory that loads without the
 * original checkpoint:
 *   config.json          Whisper dimensions (HF keys)
 *   model.safetensors    dense tensors under HF names; quantized linear
 *                        layers as compressed-tensors (NVFP4), bitsandbytes
 *                        (NF4) or sotto Q8 tensor sets (see load_hf.c), so
 *                        that other tools can read them too
 *   sotto_quant.json     the recipe: format tag, per-part policy, bytes per
 *                        part, source, and a CRC-32 for every tensor
 *   tokenizer files      copied from the source directory
 * Loading verifies every tensor against its CRC-32 and adopts the recipe's
 * policy; a damaged or mismatched snapshot is refused with an error naming
 * the file and the tensor. No pickles, no code: JSON and safetensors only.
 */
#ifndef SOTTO_SNAPSHOT_H
#define SOTTO_SNAPSHOT_H

#include "model.h"

#include <cjson/cJSON.h>

#define SOTTO_SNAPSHOT_RECIPE "sotto_quant.json"

/* Writes the loaded model m to out_dir (created if missing). */
int sotto_snapshot_save(const sotto_model *m, const char *out_dir, sotto_err *err);

/* Compares every tensor of two loaded models byte for byte (formats,
 * data, scales): SOTTO_OK if identical, else SOTTO_E_FORMAT naming the
 * first tensor that differs. */
int sotto_snapshot_compare(const sotto_model *a, const sotto_model *b, sotto_err *err);

/* For readers: if dir holds a recipe, parses it, sets m->policy and
 * m->from_snapshot, and returns it in *recipe (caller frees with
 * cJSON_Delete); else *recipe = NULL. Fails if the recipe is malformed or
 * the caller asked for other formats than the snapshot holds. */
int sotto_snapshot_read_recipe(sotto_model *m, const char *dir, cJSON **recipe, sotto_err *err);

/* Checks one tensor's bytes against the recipe's CRC-32. */
int sotto_snapshot_check_tensor(const cJSON *recipe, const char *file, const char *name,
                                const void *data, size_t nbytes, sotto_err *err);

#endif
