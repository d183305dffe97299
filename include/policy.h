/* policy.h - which storage format each part of a Whisper model gets.
 *
 * Parts: the linear layers of the encoder's attention and MLP, of the
 * decoder's self-attention, cross-attention and MLP, and the token
 * embedding (tied with the output projection). Convolutions, positional
 * embeddings, layer norms and biases always stay float32.
 *
 * Two presets for `--weights W`:
 *   "uniform": every linear layer in W; the embedding in W when W has 8
 *     bits or more, else Q8 (a 4-bit embedding broke language detection on
 *     whisper-tiny, ../shared/BACKGROUND.md);
 *   "default": uniform, except that for 4-bit W the parts whose 4-bit
 *     error was measured to cost words stay at Q8. Which parts depends on
 *     the model's size (its encoder width), per docs/PERF.md's measurement.
 * A policy string is an optional preset name followed by overrides,
 * "uniform", "uniform,decoder.mlp=q8" or just "decoder=q8" (on top of
 * "default").
 *
 * Overrides are a comma-separated list of part=format, e.g.
 *   "encoder=nvfp4,decoder=bf16"  "decoder.mlp=q8,embed=bf16"  "all=nf4"
 *   "decoder.cross=q8,encoder.0=q8,decoder.3.mlp=bf16"
 * Keys: all, encoder, decoder, encoder.attn, encoder.mlp, decoder.attn,
 * decoder.cross, decoder.mlp, embed; and per layer N (0-based):
 * encoder.N, decoder.N (every part of that layer), encoder.N.attn,
 * encoder.N.mlp, decoder.N.attn, decoder.N.cross, decoder.N.mlp. More
 * specific keys win over general ones whatever their order ("all" does not
 * touch embed; a layer key wins over its part's key). A part-wide key in an
 * override string also clears the per-layer formats the preset gave that
 * part, so "default,decoder.cross=nf4" is nf4 in every layer.
 */
#ifndef SOTTO_POLICY_H
#define SOTTO_POLICY_H

#include "linear.h"
#include "sotto_err.h"

typedef enum sotto_policy_part {
    SOTTO_POLICY_ENC_ATTN = 0,
    SOTTO_POLICY_ENC_MLP,
    SOTTO_POLICY_DEC_ATTN,
    SOTTO_POLICY_DEC_CROSS,
    SOTTO_POLICY_DEC_MLP,
    SOTTO_POLICY_EMBED,
    SOTTO_POLICY_COUNT
} sotto_policy_part;

/* Layers a policy can name one by one (large-v3 has 32 per side). */
#define SOTTO_POLICY_MAX_LAYERS 64

typedef struct sotto_policy {
    sotto_wfmt fmt[SOTTO_POLICY_COUNT]; /* each part's format in every layer... */
    /* ...except where layer_fmt[part][layer] is nonzero: that layer's part is
     * then in format layer_fmt - 1. The embedding has no layers. Compare
     * policies with sotto_policy_equal, not memcmp. */
    unsigned char layer_fmt[SOTTO_POLICY_EMBED][SOTTO_POLICY_MAX_LAYERS];
} sotto_policy;

/* The "uniform" preset of one weight format (see above). */
sotto_policy sotto_policy_uniform(sotto_wfmt weights);

/* The "default" preset of a weight format for a model of encoder width
 * n_state (384 tiny, 512 base, 768 small, 1024 medium, 1280 large and
 * large-v3-turbo); n_state 0 (not known yet) gives the uniform preset. */
sotto_policy sotto_policy_default_for(sotto_wfmt weights, int n_state);

/* *out = the preset named at the start of spec ("default" when spec does not
 * start with a preset name) for weights and n_state, then spec's
 * overrides. spec NULL or "" gives the default preset. */
int sotto_policy_resolve(sotto_policy *out, sotto_wfmt weights, int n_state, const char *spec,
                         sotto_err *err);

/* Applies overrides ("encoder=nvfp4,...") on top of *p. NULL/"" is a no-op. */
int sotto_policy_apply(sotto_policy *p, const char *overrides, sotto_err *err);

/* Part of a canonical tensor name ("enc.3.fc1.w" -> ENC_MLP); -1 for
 * tensors that are always float32. *layer (if not NULL) gets the tensor's
 * layer, -1 for the embedding. */
int sotto_policy_part_of(const char *canon_name, int *layer);

/* The format of part in layer (layer -1 or the embedding: the part's). */
sotto_wfmt sotto_policy_fmt(const sotto_policy *p, int part, int layer);

/* Sets part's format in one layer (layer >= 0) or in all of them (-1, which
 * clears that part's per-layer formats). */
void sotto_policy_set(sotto_policy *p, int part, int layer, sotto_wfmt f);

/* Where every one of a part's layers (n_enc encoder, n_dec decoder layers)
 * has the same format, makes that the part's format with no per-layer
 * entries: the policy reads the same, in fewer words. */
void sotto_policy_compact(sotto_policy *p, int n_enc, int n_dec);

/* 1 if every part of every layer has the same format in both. */
int sotto_policy_equal(const sotto_policy *a, const sotto_policy *b);

/* The highest layer the policy names one by one for the encoder (side 0)
 * or the decoder (side 1), -1 if none: a model with fewer layers refuses
 * the policy. */
int sotto_policy_max_layer(const sotto_policy *p, int side);

const char *sotto_policy_part_name(sotto_policy_part part);

/* "encoder.attn=nf4,encoder.mlp=nf4,...,embed=q8" into buf, followed by
 * the per-layer formats that differ from their part's ("decoder.1.cross=q8");
 * sotto_policy_apply parses it back to an equal policy. */
void sotto_policy_format(const sotto_policy *p, char *buf, size_t bufsz);

/* 1 if some part is stored below 8 bits. */
int sotto_policy_has_4bit(const sotto_policy *p);

#endif
