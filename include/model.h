/* model.h - internal layout of a loaded Whisper model and the interface
 * between checkpoint readers (load_ct2.c, load_hf.c) and the model builder
 * (model.c). Not a public header: the engine's users see whisper.h.
 *
 * Loading runs in two passes over a checkpoint:
 *   1. the reader fills sotto_hparams from the file's metadata (shapes,
 *      config.json) and calls sotto_model_alloc_slots();
 *   2. it hands every tensor, one at a time, to sotto_model_put() under its
 *      canonical name ("enc.3.q.w"); the builder checks the shape, converts
 *      the data to the model's storage format and stores it.
 * sotto_model_check_complete() then names any tensor that never arrived.
 */
#ifndef SOTTO_MODEL_H
#define SOTTO_MODEL_H

#include "dtype.h" /* the element types a checkpoint may hold */
#include "mapfile.h"
#include "policy.h"
#include "whisper.h"

typedef struct sotto_ln {
    const float *g, *b;
} sotto_ln;

typedef struct sotto_lin {
    sotto_wmat w;
    const float *b; /* may be NULL */
} sotto_lin;

typedef struct sotto_enc_layer {
    sotto_ln attn_ln;
    sotto_lin q, k, v, o;
    sotto_ln mlp_ln;
    sotto_lin fc1, fc2;
} sotto_enc_layer;

typedef struct sotto_dec_layer {
    sotto_ln attn_ln;
    sotto_lin q, k, v, o;
    sotto_ln cross_ln;
    sotto_lin cq, ck, cv, co;
    sotto_ln mlp_ln;
    sotto_lin fc1, fc2;
} sotto_dec_layer;

/* Which part of the model a tensor belongs to (memory accounting). */
typedef enum sotto_part {
    SOTTO_PART_ENCODER = 0,
    SOTTO_PART_DECODER,
    SOTTO_PART_EMBED,
    SOTTO_PART_COUNT
} sotto_part;

/* One tensor as it sits in a checkpoint: a 2-D view [rows][cols] (vectors
 * have rows == 1) of row-major data. `row_scale`, if not NULL, holds one
 * float per row by which integer data is divided (CTranslate2 int8). */
typedef struct sotto_src_tensor {
    const char *file;  /* for error messages */
    const char *name;  /* the checkpoint's own name */
    sotto_dtype dtype;
    int64_t rows, cols;
    const void *data;
    const float *row_scale;
} sotto_src_tensor;

typedef struct sotto_slot {
    char name[48];
    int64_t rows, cols; /* expected; rows == 1 for vectors */
    int is_matrix;      /* stored as sotto_wmat (linear weight) vs plain float */
    int required;
    int filled;
    sotto_part part;    /* memory accounting */
    int policy_part;    /* sotto_policy_part, or -1: always float32 */
    int policy_layer;   /* its layer, -1 for the embedding */
    const float **vec;  /* destination for plain float tensors */
    sotto_wmat *mat;    /* destination for linear weights */
} sotto_slot;

struct sotto_model {
    char *dir;
    const char *format_name;
    sotto_hparams hp;
    sotto_special_tokens sp;
    sotto_model_params params;
    sotto_tokenizer *tok;
    sotto_mel *mel;
    int multilingual;

    /* encoder */
    const float *conv1_w, *conv1_b, *conv2_w, *conv2_b, *enc_pos;
    sotto_enc_layer *enc;
    sotto_ln enc_ln;
    /* decoder; the token embedding doubles as the logits projection */
    sotto_wmat emb;
    const float *dec_pos;
    sotto_dec_layer *dec;
    sotto_ln dec_ln;

    int32_t *default_suppress;
    int n_default_suppress;

    sotto_policy policy;  /* formats the linear layers are stored in */
    sotto_wfmt ckpt_weights; /* the weights when none are asked: the checkpoint's own
                              * precision where sotto keeps it exactly (f16 for a float16
                              * CTranslate2 model, set by its reader), else f32 */
    struct sotto_calib *calib; /* while loading: params.calib, loaded */
    int from_snapshot;    /* loaded pre-quantized (formats fixed by the file) */
    size_t load_peak_rss; /* VmHWM after loading, bytes (0 if unknown) */
    size_t largest_tensor; /* bytes of the largest checkpoint tensor */

    sotto_device device;          /* where it runs: CPU or CUDA */
    char device_desc[160];        /* "cpu" or the GPU's name */
    const struct sotto_backend *be; /* where the layers run (backend.h); never NULL */
    void *be_model;               /* the backend's copy of the weights (opaque), or NULL */

    sotto_slot *slots;   /* kept after loading: snapshots are written from it */
    int n_slots;
    void **owned; /* buffers this model allocated */
    int n_owned, cap_owned;
    size_t part_bytes[SOTTO_PART_COUNT];
    sotto_mapfile map; /* checkpoint mapping kept alive when borrowed from */
    int borrows_map;
};

/* 1 if the caller chose formats (--weights or --policy), which a
 * pre-quantized checkpoint must then match. */
int sotto_model_formats_asked(const sotto_model *m);

/* The weight format asked for (m->ckpt_weights when none). */
sotto_wfmt sotto_model_asked_weights(const sotto_model *m);

/* Sets m->policy from the caller's weights and policy string for m->hp's
 * size (policy.h's presets). Readers call it once m->hp is filled, before
 * any tensor is put or a snapshot recipe is compared. */
int sotto_model_choose_policy(sotto_model *m, sotto_err *err);

/* Creates the slot table for m->hp (after the reader filled it). */
int sotto_model_alloc_slots(sotto_model *m, sotto_err *err);

/* Stores tensor `src` (or rows [row0, row0 + rows) of it when rows > 0, to
 * split fused Q/K/V) as canonical tensor `name`. Data that can be used in
 * place (f32, 4-byte aligned, in a mapping the model keeps) is borrowed. */
int sotto_model_put(sotto_model *m, const char *name, const sotto_src_tensor *src, int64_t row0,
                    int64_t rows, sotto_err *err);

/* Stores an already quantized weight matrix as canonical tensor `name`.
 * The buffers of w (in a checkpoint mapping) are copied, or used in place
 * when aligned and the mapping is kept. `file` names it in errors. */
int sotto_model_put_quantized(sotto_model *m, const char *name, const sotto_wmat *w,
                              const char *file, sotto_err *err);

/* Stores a zero vector of the slot's size (absent biases). */
int sotto_model_put_zeros(sotto_model *m, const char *name, sotto_err *err);

/* SOTTO_E_NOTFOUND naming the first required tensor that was never put. */
int sotto_model_check_complete(const sotto_model *m, const char *file, sotto_err *err);

/* Checkpoint readers. They fill m->hp, call sotto_model_alloc_slots() and
 * put every tensor. The model directory's config.json is theirs to read. */
int sotto_load_ct2(sotto_model *m, const char *dir, sotto_err *err);
/* The checkpoint's own precision (ckpt_weights) of dir/model.bin, read
 * from its variable table without loading the weights. */
int sotto_ct2_ckpt_weights(const char *dir, sotto_wfmt *out, sotto_err *err);
int sotto_load_hf(sotto_model *m, const char *dir, sotto_err *err);

/* Hugging Face name of a canonical tensor ("enc.3.fc1.w" ->
 * "model.encoder.layers.3.fc1.weight"); 0 or SOTTO_E_NOTFOUND. */
int sotto_hf_name(const char *canon, char *buf, size_t bufsz);

#endif
