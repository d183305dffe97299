/* whisper.h - sotto's Whisper engine: shared read-only models, per-stream
 * states, encoder and batched decoder steps.
 *
 * Model vs state: a sotto_model (one model directory + one weight format) is
 * immutable after loading and shared by every stream and thread that uses
 * it. Each stream owns a sotto_state: the encoder output and cross-attention
 * K/V of its current 30 s window, and self-attention K/V caches for up to
 * `max_seqs` decoder sequences (beams or sampled hypotheses).
 *
 * Scratch memory for a call lives in a sotto_workspace owned by the calling
 * thread (one per worker thread), so no call allocates once warmed up.
 */
#ifndef SOTTO_WHISPER_H
#define SOTTO_WHISPER_H

#include "linear.h"
#include "mel.h"
#include "sotto_err.h"
#include "tokenizer.h"

#include <stddef.h>
#include <stdint.h>

typedef struct sotto_hparams {
    int32_t n_mels;        /* 80 or 128, from the conv1 weight */
    int32_t n_audio_ctx;   /* encoder positions (1500) */
    int32_t n_audio_state; /* encoder width */
    int32_t n_audio_head;
    int32_t n_audio_layer;
    int32_t n_audio_ff;    /* encoder MLP width */
    int32_t n_text_ctx;    /* decoder positions (448) */
    int32_t n_text_state;  /* decoder width */
    int32_t n_text_head;
    int32_t n_text_layer;
    int32_t n_text_ff;
    int32_t n_vocab;       /* rows of the token embedding */
} sotto_hparams;

/* Special token ids resolved by name from the tokenizer files. -1 = absent. */
typedef struct sotto_special_tokens {
    int32_t eot, sot, sot_prev, sot_lm, no_speech, no_timestamps, transcribe, translate;
    int32_t timestamp_begin; /* no_timestamps + 1 */
    int32_t timestamp_end;   /* last id (n_vocab - 1) */
    int32_t lang_begin;      /* first language token ("<|en|>"), -1 for English-only */
    int32_t n_langs;         /* number of language tokens (0 for English-only) */
} sotto_special_tokens;

typedef enum sotto_model_format {
    SOTTO_MODEL_FORMAT_AUTO = 0,
    SOTTO_MODEL_FORMAT_CT2,  /* CTranslate2 / faster-whisper: model.bin */
    SOTTO_MODEL_FORMAT_HF    /* Hugging Face: model.safetensors + config.json */
} sotto_model_format;

/* sotto_model_params.weights when the caller does not choose: float32
 * for dense checkpoints, the stored formats for quantized ones. */
#define SOTTO_WFMT_DEFAULT ((sotto_wfmt)-1)

/* Where a model runs. AUTO: the GPU when one is usable (built with CUDA and
 * a device of sm_80 or newer is present), else the CPU with one log line
 * saying why. CUDA: the GPU or a load error naming the reason. */
typedef enum sotto_device {
    SOTTO_DEVICE_CPU = 0,
    SOTTO_DEVICE_AUTO,
    SOTTO_DEVICE_CUDA
} sotto_device;

const char *sotto_device_name(sotto_device dev);             /* "cpu", "auto", "cuda" */
int sotto_device_parse(const char *name, sotto_device *out); /* 0 or SOTTO_E_INVALID */
/* 1 if models can run on a GPU here (its description in desc); 0 and the
 * reason in why otherwise (no CUDA in this build, no driver, no device). */
int sotto_device_cuda_usable(char *desc, size_t desc_sz, char *why, size_t why_sz);
/* 1 if a model loaded for `dev` goes to the GPU (CUDA; AUTO with a usable
 * GPU, never the tests' CPU emulation), as sotto_model_load decides it. */
int sotto_device_is_gpu(sotto_device dev);
/* GPU memory in use (all processes) and in total, bytes; SOTTO_E_UNSUPPORTED
 * without a usable GPU. */
int sotto_device_memory(size_t *used, size_t *total, sotto_err *err);

typedef struct sotto_model_params {
    sotto_model_format format; /* AUTO: detected from the files */
    sotto_wfmt weights;        /* format of the linear layers, or SOTTO_WFMT_DEFAULT */
    const char *policy;        /* per-part overrides, see policy.h ("encoder=nf4,..."), or NULL */
    int nf4_double_quant;      /* NF4 absmax stored as 8-bit codes (bitsandbytes' double quant) */
    sotto_device device;       /* CPU (the default), AUTO or CUDA */
    int scale_search;          /* 4-bit block scales chosen by least squared error instead of
                                * from the absmax (quant.h); implied by calib */
    const char *calib;         /* calibration file (calib.h) weighting that error, or NULL */
} sotto_model_params;

typedef struct sotto_model sotto_model;

sotto_model_params sotto_model_default_params(void);

/* Loads a model directory. NULL + err on failure; errors name the file and
 * the problem (missing tensor, wrong shape, truncated file, ...). */
sotto_model *sotto_model_load(const char *dir, const sotto_model_params *params, sotto_err *err);
void sotto_model_free(sotto_model *model); /* accepts NULL */

/* The weights sotto_model_load uses when none are asked, for the model in
 * dir: the checkpoint's own precision (f16 for a float16 CTranslate2
 * model, f32 otherwise). Reads only the checkpoint's variable table; a
 * missing or unreadable checkpoint is an error (SOTTO_E_NOTFOUND, ...). */
int sotto_checkpoint_weights(const char *dir, sotto_wfmt *out, sotto_err *err);

const sotto_hparams *sotto_model_hparams(const sotto_model *model);
const sotto_special_tokens *sotto_model_special(const sotto_model *model);
const sotto_tokenizer *sotto_model_tokenizer(const sotto_model *model);
const sotto_mel *sotto_model_mel(const sotto_model *model);
int sotto_model_is_multilingual(const sotto_model *model);
/* Token ids suppressed by default when the tokenizer cannot encode (the
 * checkpoint's own list, e.g. CTranslate2's config "suppress_ids"); may be
 * NULL with *n == 0. */
const int32_t *sotto_model_default_suppress(const sotto_model *model, int *n);
/* Bytes of weights held in memory, in total and per part
 * (0 encoder, 1 decoder, 2 token embedding / output projection). */
size_t sotto_model_weight_bytes(const sotto_model *model);
size_t sotto_model_part_bytes(const sotto_model *model, int part);
/* The per-part formats in effect ("encoder.attn=nf4,...,embed=q8"). */
void sotto_model_policy_string(const sotto_model *model, char *buf, size_t bufsz);
/* Peak resident memory of the process right after loading (VmHWM), and
 * the largest tensor of the checkpoint, in bytes (0 if unknown). */
size_t sotto_model_load_peak_rss(const sotto_model *model);
size_t sotto_model_largest_tensor(const sotto_model *model);
/* Where the model runs (CPU or CUDA, never AUTO once loaded), and the
 * device's name ("cpu" or e.g. "NVIDIA H200 (sm_90, 139 GiB)"). */
sotto_device sotto_model_device(const sotto_model *model);
const char *sotto_model_device_desc(const sotto_model *model);
/* Bytes of device memory the model's weights hold on the GPU, per part
 * (as sotto_model_part_bytes; 0 on the CPU). */
size_t sotto_model_device_part_bytes(const sotto_model *model, int part);
/* 1 if the model was loaded from a pre-quantized sotto snapshot. */
int sotto_model_is_snapshot(const sotto_model *model);
/* "ct2" or "hf". */
const char *sotto_model_format_name(const sotto_model *model);
/* The directory it was loaded from. */
const char *sotto_model_dir(const sotto_model *model);

/* ---- per-thread scratch ---------------------------------------------- */

typedef struct sotto_workspace sotto_workspace;
sotto_workspace *sotto_workspace_create(void);
void sotto_workspace_free(sotto_workspace *ws); /* accepts NULL */

/* ---- per-stream state ------------------------------------------------- */

typedef struct sotto_state sotto_state;

/* max_seqs: decoder sequences held at once (beam size / best_of, >= 1). */
sotto_state *sotto_state_create(const sotto_model *model, int max_seqs, sotto_err *err);
void sotto_state_free(sotto_state *st); /* accepts NULL */
int sotto_state_max_seqs(const sotto_state *st);

/* Runs the encoder on one window of log-mel features, row-major
 * [n_mels][n_audio_ctx * 2] (3000 frames), and computes every decoder
 * layer's cross-attention K/V. Resets all decoder sequences to length 0. */
int sotto_encode(const sotto_model *model, sotto_workspace *ws, sotto_state *st,
                 const float *mel, sotto_err *err);

/* The same for B windows at once (streaming sessions that share a model):
 * the linear layers run over all B * n_audio_ctx rows together, so the
 * weights are read once per batch; attention stays within each window.
 * sts[b] receives the window mels[b]; the states must be distinct. The
 * workspace grows to B windows' activations. */
int sotto_encode_batch(const sotto_model *model, sotto_workspace *ws, sotto_state *const *sts,
                       const float *const *mels, int B, sotto_err *err);

/* The same with window b cut to its first n_ctx[b] encoder positions
 * (1..n_audio_ctx; 2 * n_ctx[b] mel frames of mels[b], whose row stride stays
 * 3000 frames), as whisper.cpp's audio_ctx: the positional embedding and
 * the cross-attention are cut to match, so a short window costs in
 * proportion to its length. Whisper was trained on 30 s windows only: this
 * changes the transcripts (docs/PERF.md measures by how much). n_ctx NULL:
 * whole windows. The GPU backend encodes whole windows whatever n_ctx says. */
int sotto_encode_batch_ctx(const sotto_model *model, sotto_workspace *ws, sotto_state *const *sts,
                           const float *const *mels, const int *n_ctx, int B, sotto_err *err);

/* Encoder positions for a window of n_samples of audio followed by at least
 * pad_samples of padding, in whole seconds (50 positions each), at most
 * n_audio_ctx: the n_ctx to give sotto_encode_batch_ctx for it. */
int sotto_encoder_positions(const sotto_model *model, size_t n_samples, size_t pad_samples);

/* Encoder positions that hold the last encode of st (n_audio_ctx for a whole window). */
int sotto_state_encoded_positions(const sotto_state *st);

/* The encoder output of the last sotto_encode, [n_audio_ctx][n_audio_state]
 * (its first sotto_state_encoded_positions rows are set). */
const float *sotto_state_encoder_output(const sotto_state *st);

/* Length (tokens already in the KV cache) of sequence `seq`. */
int sotto_state_seq_len(const sotto_state *st, int seq);
/* Truncates sequence `seq` to `len` tokens (len <= current length). */
int sotto_state_seq_truncate(sotto_state *st, int seq, int len);
/* Makes sequences dst[i] copies of src[i] for i < n (KV caches and length);
 * a permutation is handled correctly (sources are read before writes). */
int sotto_state_seq_gather(sotto_state *st, const int *dst, const int *src, int n);

/* Feeds n_tokens tokens to sequence `seq` (appending to its KV cache) and
 * writes the logits [n_want][n_vocab] of the positions listed in
 * want[] (indices into tokens[], each < n_tokens); n_want may be 0. */
int sotto_decode_tokens(const sotto_model *model, sotto_workspace *ws, sotto_state *st, int seq,
                        const int32_t *tokens, int n_tokens, const int *want, int n_want,
                        float *logits, sotto_err *err);

/* One decoder step for n rows at once: row i appends tokens[i] to sequence
 * seqs[i] of states[i] and gets logits[i][n_vocab]. Rows may belong to
 * different states (streams) of the same model; a (state, seq) pair may
 * appear only once. */
int sotto_decode_step(const sotto_model *model, sotto_workspace *ws, sotto_state *const *states,
                      const int *seqs, const int32_t *tokens, int n, float *logits,
                      sotto_err *err);

#endif
