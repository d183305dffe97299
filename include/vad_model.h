/* vad_model.h - where programs find the Silero VAD weights by default. */
#ifndef SOTTO_VAD_MODEL_H
#define SOTTO_VAD_MODEL_H

#include <stddef.h>

#define SOTTO_VAD_MODEL_REL "models/silero_vad/silero_vad.safetensors"

/* The default Silero weights file: $SOTTO_VAD_MODEL if set, else
 * SOTTO_VAD_MODEL_REL beside the executable's parent directory (the
 * repository, for build/ programs), else SOTTO_VAD_MODEL_REL in the working
 * directory. Written to buf; returns buf if that file exists, else NULL
 * (buf then holds the path that was looked for last). */
const char *sotto_vad_model_default(char *buf, size_t bufsz);

#endif
