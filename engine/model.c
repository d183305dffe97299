/* model.c - the model builder (slot table, tensor conversion, memory
 * accounting) and model loading / accessors. */
#define _POSIX_C_SOURCE 200809L
#include "model.h"

#include "calib.h"

#include "backend.h"
#include "gpu.h"

#include "half.h"
#include "log.h"
#include "quant.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stddef.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- slot table ------------------------------------------------------ */

typedef struct slot_builder {
    sotto_model *m;
    int n;
} slot_builder;

/* The format the policy gives a slot's matrix (float32 for dense ones). */
static sotto_wfmt slot_fmt(const sotto_model *m, const sotto_slot *s) {
    return s->policy_part >= 0 ? sotto_policy_fmt(&m->policy, s->policy_part, s->policy_layer)
                               : SOTTO_WFMT_F32;
}

static void add_slot(slot_builder *sb, const char *name, int64_t rows, int64_t cols, int required,
                     sotto_part part, const float **vec, sotto_wmat *mat) {
    sotto_slot *s = &sb->m->slots[sb->n++];
    snprintf(s->name, sizeof s->name, "%s", name);
    s->rows = rows;
    s->cols = cols;
    s->required = required;
    s->part = part;
    s->vec = vec;
    s->mat = mat;
    s->is_matrix = mat != NULL;
    s->policy_layer = -1;
    s->policy_part = mat ? sotto_policy_part_of(name, &s->policy_layer) : -1;
}

static void add_ln(slot_builder *sb, const char *prefix, int64_t d, sotto_part part,
                   sotto_ln *ln) {
    char name[48];
    snprintf(name, sizeof name, "%s.g", prefix);
    add_slot(sb, name, 1, d, 1, part, &ln->g, NULL);
    snprintf(name, sizeof name, "%s.b", prefix);
    add_slot(sb, name, 1, d, 1, part, &ln->b, NULL);
}

static void add_lin(slot_builder *sb, const char *prefix, int64_t out, int64_t in,
                    int bias_required, sotto_part part, sotto_lin *lin) {
    char name[48];
    snprintf(name, sizeof name, "%s.w", prefix);
    add_slot(sb, name, out, in, 1, part, NULL, &lin->w);
    snprintf(name, sizeof name, "%s.b", prefix);
    add_slot(sb, name, 1, out, bias_required, part, &lin->b, NULL);
}

sotto_wfmt sotto_model_asked_weights(const sotto_model *m) {
    return m->params.weights == SOTTO_WFMT_DEFAULT ? m->ckpt_weights : m->params.weights;
}

int sotto_model_choose_policy(sotto_model *m, sotto_err *err) {
    int rc = sotto_policy_resolve(&m->policy, sotto_model_asked_weights(m), m->hp.n_audio_state,
                                  m->params.policy, err);
    if (rc) return rc;
    const int have[2] = {m->hp.n_audio_layer, m->hp.n_text_layer};
    for (int side = 0; side < 2; side++) {
        int top = sotto_policy_max_layer(&m->policy, side);
        if (top >= have[side])
            return sotto_err_set(err, SOTTO_E_INVALID,
                                 "policy names %s layer %d, but this model's %s has %d layers "
                                 "(0 to %d)",
                                 side ? "decoder" : "encoder", top, side ? "decoder" : "encoder",
                                 have[side], have[side] - 1);
    }
    if (!m->calib) return rc;
    char want[128];
    sotto_calib_model_string(m, want, sizeof want);
    if (strcmp(want, sotto_calib_model(m->calib)) != 0)
        return sotto_err_set(err, SOTTO_E_INVALID,
                             "calibration file %s was recorded on another model (%s; this one "
                             "is %s)",
                             sotto_calib_path(m->calib), sotto_calib_model(m->calib), want);
    return SOTTO_OK;
}

int sotto_model_alloc_slots(sotto_model *m, sotto_err *err) {
    const sotto_hparams *hp = &m->hp;
    if (hp->n_mels < 1 || hp->n_mels > 512 || hp->n_audio_state < 1 || hp->n_audio_head < 1 ||
        hp->n_audio_layer < 1 || hp->n_audio_layer > 256 || hp->n_text_state < 1 ||
        hp->n_text_head < 1 || hp->n_text_layer < 1 || hp->n_text_layer > 256 ||
        hp->n_vocab < 1 || hp->n_text_ctx < 1 || hp->n_audio_ff < 1 || hp->n_text_ff < 1)
        return sotto_err_set(err, SOTTO_E_FORMAT,
                             "%s: implausible model dimensions (mels %d, width %d/%d, heads "
                             "%d/%d, layers %d/%d, vocab %d)",
                             m->dir, hp->n_mels, hp->n_audio_state, hp->n_text_state,
                             hp->n_audio_head, hp->n_text_head, hp->n_audio_layer,
                             hp->n_text_layer, hp->n_vocab);
    if (hp->n_audio_state % hp->n_audio_head || hp->n_text_state % hp->n_text_head)
        return sotto_err_set(err, SOTTO_E_FORMAT, "%s: width %d/%d not divisible by heads %d/%d",
                             m->dir, hp->n_audio_state, hp->n_text_state, hp->n_audio_head,
                             hp->n_text_head);
    if (hp->n_audio_ctx * 2 != SOTTO_N_FRAMES)
        return sotto_err_set(err, SOTTO_E_UNSUPPORTED,
                             "%s: encoder has %d positions; sotto supports Whisper's 1500 "
                             "(30 s windows)",
                             m->dir, hp->n_audio_ctx);
    if (hp->n_audio_state != hp->n_text_state)
        return sotto_err_set(err, SOTTO_E_UNSUPPORTED,
                             "%s: encoder width %d differs from decoder width %d", m->dir,
                             hp->n_audio_state, hp->n_text_state);

    m->enc = calloc((size_t)hp->n_audio_layer, sizeof *m->enc);
    m->dec = calloc((size_t)hp->n_text_layer, sizeof *m->dec);
    int max_slots = 16 + hp->n_audio_layer * 16 + hp->n_text_layer * 26;
    m->slots = calloc((size_t)max_slots, sizeof *m->slots);
    if (!m->enc || !m->dec || !m->slots)
        return sotto_err_set(err, SOTTO_E_NOMEM, "out of memory for the model tables");

    slot_builder sb = {m, 0};
    const int64_t da = hp->n_audio_state, dt = hp->n_text_state;
    const sotto_part E = SOTTO_PART_ENCODER, D = SOTTO_PART_DECODER;
    add_slot(&sb, "enc.conv1.w", da, (int64_t)hp->n_mels * 3, 1, E, &m->conv1_w, NULL);
    add_slot(&sb, "enc.conv1.b", 1, da, 1, E, &m->conv1_b, NULL);
    add_slot(&sb, "enc.conv2.w", da, da * 3, 1, E, &m->conv2_w, NULL);
    add_slot(&sb, "enc.conv2.b", 1, da, 1, E, &m->conv2_b, NULL);
    add_slot(&sb, "enc.pos", hp->n_audio_ctx, da, 1, E, &m->enc_pos, NULL);
    add_ln(&sb, "enc.ln", da, E, &m->enc_ln);
    char p[48];
    for (int i = 0; i < hp->n_audio_layer; i++) {
        sotto_enc_layer *L = &m->enc[i];
#define P(s) (snprintf(p, sizeof p, "enc.%d." s, i), p)
        add_ln(&sb, P("attn_ln"), da, E, &L->attn_ln);
        add_lin(&sb, P("q"), da, da, 1, E, &L->q);
        add_lin(&sb, P("k"), da, da, 0, E, &L->k);
        add_lin(&sb, P("v"), da, da, 1, E, &L->v);
        add_lin(&sb, P("o"), da, da, 1, E, &L->o);
        add_ln(&sb, P("mlp_ln"), da, E, &L->mlp_ln);
        add_lin(&sb, P("fc1"), hp->n_audio_ff, da, 1, E, &L->fc1);
        add_lin(&sb, P("fc2"), da, hp->n_audio_ff, 1, E, &L->fc2);
#undef P
    }
    add_slot(&sb, "dec.emb", hp->n_vocab, dt, 1, SOTTO_PART_EMBED, NULL, &m->emb);
    add_slot(&sb, "dec.pos", hp->n_text_ctx, dt, 1, D, &m->dec_pos, NULL);
    add_ln(&sb, "dec.ln", dt, D, &m->dec_ln);
    for (int i = 0; i < hp->n_text_layer; i++) {
        sotto_dec_layer *L = &m->dec[i];
#define P(s) (snprintf(p, sizeof p, "dec.%d." s, i), p)
        add_ln(&sb, P("attn_ln"), dt, D, &L->attn_ln);
        add_lin(&sb, P("q"), dt, dt, 1, D, &L->q);
        add_lin(&sb, P("k"), dt, dt, 0, D, &L->k);
        add_lin(&sb, P("v"), dt, dt, 1, D, &L->v);
        add_lin(&sb, P("o"), dt, dt, 1, D, &L->o);
        add_ln(&sb, P("cross_ln"), dt, D, &L->cross_ln);
        add_lin(&sb, P("cq"), dt, dt, 1, D, &L->cq);
        add_lin(&sb, P("ck"), dt, da, 0, D, &L->ck);
        add_lin(&sb, P("cv"), dt, da, 1, D, &L->cv);
        add_lin(&sb, P("co"), dt, dt, 1, D, &L->co);
        add_ln(&sb, P("mlp_ln"), dt, D, &L->mlp_ln);
        add_lin(&sb, P("fc1"), hp->n_text_ff, dt, 1, D, &L->fc1);
        add_lin(&sb, P("fc2"), dt, hp->n_text_ff, 1, D, &L->fc2);
#undef P
    }
    m->n_slots = sb.n;
    return SOTTO_OK;
}

static sotto_slot *find_slot(sotto_model *m, const char *name) {
    for (int i = 0; i < m->n_slots; i++)
        if (strcmp(m->slots[i].name, name) == 0) return &m->slots[i];
    return NULL;
}

static void *model_alloc(sotto_model *m, size_t bytes) {
    if (m->n_owned == m->cap_owned) {
        int cap = m->cap_owned ? m->cap_owned * 2 : 256;
        void **nb = realloc(m->owned, (size_t)cap * sizeof *nb);
        if (!nb) return NULL;
        m->owned = nb;
        m->cap_owned = cap;
    }
    void *p = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
    if (p) m->owned[m->n_owned++] = p;
    return p;
}

/* Converts rows*cols elements of `src` starting at element offset `off` to
 * float32 in dst. */
static int convert_to_f32(const sotto_src_tensor *src, int64_t row0, int64_t rows, float *dst,
                          sotto_err *err) {
    const int64_t cols = src->cols;
    const size_t es = sotto_dtype_size(src->dtype);
    const unsigned char *base = (const unsigned char *)src->data + (size_t)(row0 * cols) * es;
    for (int64_t r = 0; r < rows; r++) {
        const unsigned char *in = base + (size_t)(r * cols) * es;
        float *out = dst + r * cols;
        float div = src->row_scale ? src->row_scale[row0 + r] : 1.0f;
        switch (src->dtype) {
        case SOTTO_DT_F32: memcpy(out, in, (size_t)cols * 4); break;
        case SOTTO_DT_F16:
            for (int64_t c = 0; c < cols; c++) {
                uint16_t h;
                memcpy(&h, in + 2 * c, 2);
                out[c] = sotto_fp16_to_f32(h);
            }
            break;
        case SOTTO_DT_BF16:
            for (int64_t c = 0; c < cols; c++) {
                uint16_t h;
                memcpy(&h, in + 2 * c, 2);
                out[c] = sotto_bf16_to_f32(h);
            }
            break;
        case SOTTO_DT_I8:
            for (int64_t c = 0; c < cols; c++) out[c] = (float)((const int8_t *)in)[c] / div;
            break;
        case SOTTO_DT_I16:
            for (int64_t c = 0; c < cols; c++) {
                int16_t v;
                memcpy(&v, in + 2 * c, 2);
                out[c] = (float)v / div;
            }
            break;
        default:
            return sotto_err_set(err, SOTTO_E_UNSUPPORTED, "%s: tensor '%s' has type %s",
                                 src->file, src->name, sotto_dtype_name(src->dtype));
        }
        if (src->dtype == SOTTO_DT_F32 && src->row_scale)
            for (int64_t c = 0; c < cols; c++) out[c] /= div;
    }
    return SOTTO_OK;
}

/* Bytes of the data and scale arrays of a rows x cols matrix in fmt. */
static void fmt_sizes(sotto_wfmt f, int64_t rows, int64_t cols, size_t *data, size_t *scales) {
    size_t n = (size_t)(rows * cols);
    *scales = 0;
    switch (f) {
    case SOTTO_WFMT_F32: *data = n * 4; break;
    case SOTTO_WFMT_F16:
    case SOTTO_WFMT_BF16: *data = n * 2; break;
    case SOTTO_WFMT_Q8: *data = n, *scales = n / 32 * 4; break;
    case SOTTO_WFMT_NF4: *data = n / 2, *scales = n / 64 * 4; break;
    case SOTTO_WFMT_NVFP4: *data = n / 2, *scales = n / 16; break;
    default: *data = 0; break;
    }
}

static int in_map(const sotto_model *m, const void *p, size_t bytes) {
    const unsigned char *b = p;
    return m->map.data && b >= m->map.data && bytes <= m->map.size &&
           b - m->map.data <= (ptrdiff_t)(m->map.size - bytes);
}

/* Index of the first NaN or infinity among the n elements at p (aligned for
 * fmt), or (size_t)-1; f32 and f16 are checked, bf16 is not (as before). */
static size_t first_nonfinite(sotto_wfmt fmt, const void *p, size_t n) {
    if (fmt == SOTTO_WFMT_F32) {
        const float *d = p;
        for (size_t i = 0; i < n; i++)
            if (!(d[i] - d[i] == 0.0f)) return i;
    } else if (fmt == SOTTO_WFMT_F16) {
        const uint16_t *h = p;
        for (size_t i = 0; i < n; i++)
            if ((h[i] & 0x7c00u) == 0x7c00u) return i; /* all exponent bits: inf or NaN */
    }
    return (size_t)-1;
}

/* Rows converted to float32 at a time while quantizing. */
#define QUANT_CHUNK_ROWS 64

/* Stores a dense source matrix in the slot's format, converting and
 * quantizing QUANT_CHUNK_ROWS rows at a time so that no float32 copy of a
 * big tensor is ever held. */
static int store_matrix(sotto_model *m, sotto_slot *s, const sotto_src_tensor *src, int64_t row0,
                        sotto_err *err) {
    sotto_wfmt f = slot_fmt(m, s);
    const int64_t rows = s->rows, cols = s->cols;
    int block = sotto_wfmt_block(f);
    if (block > 1 && cols % block)
        return sotto_err_set(err, SOTTO_E_UNSUPPORTED,
                             "%s: tensor '%s' has %lld columns, not a multiple of the %s block "
                             "of %d",
                             src->file, src->name, (long long)cols, sotto_wfmt_name(f), block);
    const size_t es = sotto_dtype_size(src->dtype);
    const unsigned char *p = (const unsigned char *)src->data + (size_t)(row0 * src->cols) * es;
    const size_t src_bytes = (size_t)(rows * cols) * es;
    sotto_wmat *w = s->mat;
    memset(w, 0, sizeof *w);
    w->fmt = f;
    w->rows = (int32_t)rows;
    w->cols = (int32_t)cols;
    /* used in place: float32, float16 or bfloat16 data that needs no conversion */
    if (!src->row_scale && in_map(m, p, src_bytes) &&
        ((f == SOTTO_WFMT_F32 && src->dtype == SOTTO_DT_F32 && ((uintptr_t)p & 3u) == 0) ||
         (f == SOTTO_WFMT_F16 && src->dtype == SOTTO_DT_F16 && ((uintptr_t)p & 1u) == 0) ||
         (f == SOTTO_WFMT_BF16 && src->dtype == SOTTO_DT_BF16 && ((uintptr_t)p & 1u) == 0))) {
        size_t bad = first_nonfinite(f, p, (size_t)(rows * cols));
        if (bad != (size_t)-1)
            return sotto_err_set(err, SOTTO_E_FORMAT,
                                 "%s: tensor '%s' holds a non-finite value at element %zu",
                                 src->file, src->name, bad);
        w->data = p;
        m->borrows_map = 1;
        return SOTTO_OK;
    }
    size_t dbytes, sbytes;
    fmt_sizes(f, rows, cols, &dbytes, &sbytes);
    const int dq_nf4 = f == SOTTO_WFMT_NF4 && m->params.nf4_double_quant;
    void *data = model_alloc(m, dbytes);
    /* with double quantization the float absmax is only a step on the way */
    void *scales = !sbytes ? NULL : dq_nf4 ? malloc(sbytes) : model_alloc(m, sbytes);
    float *chunk = malloc(sizeof(float) * (size_t)(QUANT_CHUNK_ROWS * cols));
    int rc = SOTTO_OK;
    if (!data || (sbytes && !scales) || !chunk) {
        rc = sotto_err_set(err, SOTTO_E_NOMEM, "out of memory for tensor %s", s->name);
        goto done;
    }
    w->data = data;
    w->scales = scales;
    sotto_quant_opts qo = {m->params.scale_search || m->calib, NULL};
    if (m->calib && (f == SOTTO_WFMT_NF4 || f == SOTTO_WFMT_NVFP4) &&
        !(qo.importance = sotto_calib_get(m->calib, s->name, cols))) {
        rc = sotto_err_set(err, SOTTO_E_NOTFOUND,
                           "%s: calibration file %s has no statistics for %s (%lld columns)",
                           m->dir, sotto_calib_path(m->calib), s->name, (long long)cols);
        goto done;
    }
    if (f == SOTTO_WFMT_NVFP4) { /* the global scale needs the whole tensor's amax */
        float amax = 0.0f;
        for (int64_t r = 0; r < rows && rc == 0; r += QUANT_CHUNK_ROWS) {
            int64_t nr = rows - r < QUANT_CHUNK_ROWS ? rows - r : QUANT_CHUNK_ROWS;
            rc = convert_to_f32(src, row0 + r, nr, chunk, err);
            for (int64_t i = 0; i < nr * cols && rc == 0; i++) {
                float a = fabsf(chunk[i]);
                amax = a > amax ? a : amax;
            }
        }
        if (rc) goto done;
        /* snapshots store the reciprocal (compressed-tensors' convention):
         * use a multiplier whose reciprocal round-trips exactly */
        float g = sotto_nvfp4_global_scale(amax);
        for (int it = 0; it < 4 && 1.0f / (1.0f / g) != g; it++) g = 1.0f / (1.0f / g);
        w->global_scale = g;
    }
    for (int64_t r = 0; r < rows && rc == 0; r += QUANT_CHUNK_ROWS) {
        int64_t nr = rows - r < QUANT_CHUNK_ROWS ? rows - r : QUANT_CHUNK_ROWS;
        if ((rc = convert_to_f32(src, row0 + r, nr, chunk, err))) break;
        if (f == SOTTO_WFMT_F32) {
            for (int64_t i = 0; i < nr * cols; i++)
                if (!(chunk[i] - chunk[i] == 0.0f)) {
                    rc = sotto_err_set(err, SOTTO_E_FORMAT,
                                       "%s: tensor '%s' holds a non-finite value at element %lld",
                                       src->file, src->name, (long long)(r * cols + i));
                    break;
                }
            if (rc == 0) memcpy((float *)data + r * cols, chunk, sizeof(float) * (size_t)(nr * cols));
        } else {
            rc = sotto_quantize_rows_opt(w, data, scales, chunk, (int)r, (int)nr, &qo);
            if (rc)
                sotto_err_set(err, rc, "%s: tensor '%s' cannot be quantized to %s%s", src->file,
                              src->name, sotto_wfmt_name(f),
                              rc == SOTTO_E_FORMAT  ? " (non-finite values)"
                              : rc == SOTTO_E_RANGE ? " (values beyond a half's range)"
                                                    : "");
        }
    }
    if (rc == 0 && dq_nf4) {
        /* bitsandbytes' double quantization of the absmax values */
        size_t nb = (size_t)(rows * cols) / 64, nn = (nb + 255) / 256;
        sotto_nf4_dq *dq = model_alloc(m, sizeof *dq);
        uint8_t *codes = model_alloc(m, nb);
        float *nested = model_alloc(m, nn * sizeof(float));
        if (!dq || !codes || !nested) {
            rc = sotto_err_set(err, SOTTO_E_NOMEM, "out of memory for tensor %s", s->name);
            goto done;
        }
        sotto_nf4_double_quant(scales, nb, codes, nested, &dq->offset);
        dq->codes = codes;
        dq->nested_absmax = nested;
        w->nf4_dq = dq;
        w->scales = NULL;
    }
    if (rc == 0 && in_map(m, p, src_bytes)) sotto_mapfile_release(&m->map, p, src_bytes);
done:
    free(chunk);
    if (dq_nf4) free(scales);
    return rc;
}

int sotto_model_put(sotto_model *m, const char *name, const sotto_src_tensor *src, int64_t row0,
                    int64_t rows, sotto_err *err) {
    sotto_slot *s = find_slot(m, name);
    if (!s)
        return sotto_err_set(err, SOTTO_E_FORMAT, "%s: tensor '%s' (as %s) does not fit this model",
                             src->file, src->name, name);
    if (rows <= 0) {
        row0 = 0;
        rows = src->rows;
    }
    if (row0 < 0 || row0 > src->rows || rows > src->rows - row0 || rows != s->rows ||
        src->cols != s->cols)
        return sotto_err_set(err, SOTTO_E_FORMAT,
                             "%s: tensor '%s' has shape [%lld x %lld], expected %s to be "
                             "[%lld x %lld]",
                             src->file, src->name, (long long)src->rows, (long long)src->cols, name,
                             (long long)s->rows, (long long)s->cols);
    if (s->filled)
        return sotto_err_set(err, SOTTO_E_FORMAT, "%s: tensor '%s' given twice (as %s)", src->file,
                             src->name, name);
    size_t tensor_bytes = (size_t)(src->rows * src->cols) * sotto_dtype_size(src->dtype);
    if (tensor_bytes > m->largest_tensor) m->largest_tensor = tensor_bytes;
    int rc;
    if (s->is_matrix) {
        if ((rc = store_matrix(m, s, src, row0, err))) return rc;
        m->part_bytes[s->part] += sotto_wmat_bytes(s->mat);
    } else {
        const size_t n = (size_t)(s->rows * s->cols);
        const unsigned char *p = (const unsigned char *)src->data + (size_t)(row0 * src->cols) * 4;
        const float *data = NULL;
        if (src->dtype == SOTTO_DT_F32 && !src->row_scale && in_map(m, p, n * 4) &&
            ((uintptr_t)p & 3u) == 0) {
            data = (const float *)p; /* borrowed from the mapping */
            m->borrows_map = 1;
        } else {
            float *buf = model_alloc(m, n * sizeof(float));
            if (!buf) return sotto_err_set(err, SOTTO_E_NOMEM, "out of memory for tensor %s", name);
            if ((rc = convert_to_f32(src, row0, rows, buf, err))) return rc;
            data = buf;
        }
        for (size_t i = 0; i < n; i++) {
            if (!(data[i] - data[i] == 0.0f)) /* NaN or Inf */
                return sotto_err_set(err, SOTTO_E_FORMAT,
                                     "%s: tensor '%s' holds a non-finite value at element %zu",
                                     src->file, src->name, i);
        }
        *s->vec = data;
        m->part_bytes[s->part] += n * sizeof(float);
    }
    s->filled = 1;
    return SOTTO_OK;
}

int sotto_model_put_quantized(sotto_model *m, const char *name, const sotto_wmat *w,
                              const char *file, sotto_err *err) {
    sotto_slot *s = find_slot(m, name);
    if (!s || !s->is_matrix)
        return sotto_err_set(err, SOTTO_E_FORMAT, "%s: quantized tensor %s does not fit this model",
                             file, name);
    if (w->rows != s->rows || w->cols != s->cols)
        return sotto_err_set(err, SOTTO_E_FORMAT,
                             "%s: quantized %s is [%d x %d], expected [%lld x %lld]", file, name,
                             w->rows, w->cols, (long long)s->rows, (long long)s->cols);
    if (s->filled)
        return sotto_err_set(err, SOTTO_E_FORMAT, "%s: tensor %s given twice", file, name);
    /* A checkpoint that comes quantized (llm-compressor NVFP4, bitsandbytes
     * NF4) sets the format of its part unless the caller asked for formats
     * or a snapshot recipe fixed them; then the two must agree. */
    int asked = sotto_model_formats_asked(m);
    if (s->policy_part < 0)
        return sotto_err_set(err, SOTTO_E_FORMAT, "%s: %s must be dense, it is %s", file, name,
                             sotto_wfmt_name(w->fmt));
    if (slot_fmt(m, s) != w->fmt) {
        if (asked || m->from_snapshot)
            return sotto_err_set(err, SOTTO_E_FORMAT,
                                 "%s: %s is stored as %s, but %s was %s for %s", file, name,
                                 sotto_wfmt_name(w->fmt), sotto_wfmt_name(slot_fmt(m, s)),
                                 m->from_snapshot ? "recorded in the recipe" : "asked",
                                 sotto_policy_part_name(s->policy_part));
        /* (per layer: a checkpoint may hold its layers in different formats) */
        sotto_policy_set(&m->policy, s->policy_part, s->policy_layer, w->fmt);
    }
    int block = sotto_wfmt_block(w->fmt);
    if (block > 1 && w->cols % block)
        return sotto_err_set(err, SOTTO_E_FORMAT, "%s: %s has %d columns, not a multiple of %d",
                             file, name, w->cols, block);
    size_t dbytes, sbytes;
    fmt_sizes(w->fmt, w->rows, w->cols, &dbytes, &sbytes);
    if (w->nf4_dq) sbytes = 0; /* absmax comes as double-quantized tables */
    *s->mat = *w;
    /* data: bytes (any alignment for 8/4-bit codes, 2 for bf16, 4 for f32) */
    size_t align = w->fmt == SOTTO_WFMT_F32                                  ? 4
                   : w->fmt == SOTTO_WFMT_BF16 || w->fmt == SOTTO_WFMT_F16 ? 2
                                                                            : 1;
    const void *arrays[2] = {w->data, w->scales};
    size_t sizes[2] = {dbytes, sbytes};
    size_t aligns[2] = {align, w->fmt == SOTTO_WFMT_NVFP4 ? 1 : 4};
    const void **dst[2] = {&s->mat->data, &s->mat->scales};
    for (int k = 0; k < 2; k++) {
        if (!sizes[k]) continue;
        if (in_map(m, arrays[k], sizes[k]) && ((uintptr_t)arrays[k] & (aligns[k] - 1)) == 0) {
            m->borrows_map = 1;
            continue;
        }
        void *copy = model_alloc(m, sizes[k]);
        if (!copy) return sotto_err_set(err, SOTTO_E_NOMEM, "out of memory for %s", name);
        memcpy(copy, arrays[k], sizes[k]);
        *dst[k] = copy;
    }
    if (w->nf4_dq) { /* small tables: always copied */
        size_t nb = (size_t)w->rows * w->cols / 64, nn = (nb + 255) / 256;
        sotto_nf4_dq *dq = model_alloc(m, sizeof *dq);
        uint8_t *codes = model_alloc(m, nb);
        float *nested = model_alloc(m, nn * sizeof(float));
        if (!dq || !codes || !nested) return sotto_err_set(err, SOTTO_E_NOMEM, "out of memory");
        memcpy(codes, w->nf4_dq->codes, nb);
        memcpy(nested, w->nf4_dq->nested_absmax, nn * sizeof(float)); /* may be unaligned */
        dq->codes = codes;
        dq->nested_absmax = nested;
        dq->offset = w->nf4_dq->offset;
        s->mat->nf4_dq = dq;
        s->mat->scales = NULL;
    }
    s->filled = 1;
    m->part_bytes[s->part] += sotto_wmat_bytes(s->mat);
    return SOTTO_OK;
}

int sotto_model_put_zeros(sotto_model *m, const char *name, sotto_err *err) {
    sotto_slot *s = find_slot(m, name);
    if (!s || s->is_matrix)
        return sotto_err_set(err, SOTTO_E_INTERNAL, "no vector slot %s", name);
    size_t n = (size_t)(s->rows * s->cols);
    float *buf = model_alloc(m, n * sizeof(float));
    if (!buf) return sotto_err_set(err, SOTTO_E_NOMEM, "out of memory for tensor %s", name);
    memset(buf, 0, n * sizeof(float));
    *s->vec = buf;
    s->filled = 1;
    return SOTTO_OK;
}

int sotto_model_check_complete(const sotto_model *m, const char *file, sotto_err *err) {
    for (int i = 0; i < m->n_slots; i++) {
        const sotto_slot *s = &m->slots[i];
        if (s->required && !s->filled)
            return sotto_err_set(err, SOTTO_E_NOTFOUND, "%s: missing tensor for %s", file,
                                 s->name);
    }
    return SOTTO_OK;
}

/* ---- special tokens and config --------------------------------------- */

static int32_t tok_id(const sotto_tokenizer *t, const char *s) {
    return sotto_tokenizer_token_id(t, s);
}

static int resolve_special(sotto_model *m, sotto_err *err) {
    const sotto_tokenizer *t = m->tok;
    sotto_special_tokens *sp = &m->sp;
    sp->eot = tok_id(t, "<|endoftext|>");
    sp->sot = tok_id(t, "<|startoftranscript|>");
    sp->sot_prev = tok_id(t, "<|startofprev|>");
    sp->sot_lm = tok_id(t, "<|startoflm|>");
    sp->no_speech = tok_id(t, "<|nospeech|>");
    if (sp->no_speech < 0) sp->no_speech = tok_id(t, "<|nocaptions|>");
    sp->no_timestamps = tok_id(t, "<|notimestamps|>");
    sp->transcribe = tok_id(t, "<|transcribe|>");
    sp->translate = tok_id(t, "<|translate|>");
    const char *missing = sp->eot < 0 ? "<|endoftext|>"
                          : sp->sot < 0 ? "<|startoftranscript|>"
                          : sp->no_timestamps < 0 ? "<|notimestamps|>"
                                                  : NULL;
    if (missing)
        return sotto_err_set(err, SOTTO_E_FORMAT, "%s: tokenizer has no %s token", m->dir,
                             missing);
    sp->timestamp_begin = sp->no_timestamps + 1;
    sp->timestamp_end = m->hp.n_vocab - 1;
    if (sp->timestamp_begin > sp->timestamp_end || sp->eot >= m->hp.n_vocab ||
        sp->sot >= m->hp.n_vocab)
        return sotto_err_set(err, SOTTO_E_FORMAT,
                             "%s: special tokens (eot %d, notimestamps %d) do not fit the "
                             "vocabulary of %d",
                             m->dir, sp->eot, sp->no_timestamps, m->hp.n_vocab);
    int32_t ts0 = tok_id(t, "<|0.00|>");
    if (ts0 >= 0 && ts0 != sp->timestamp_begin)
        return sotto_err_set(err, SOTTO_E_FORMAT,
                             "%s: <|0.00|> is token %d, expected %d (after <|notimestamps|>)",
                             m->dir, ts0, sp->timestamp_begin);
    m->multilingual = m->hp.n_vocab >= 51865;
    sp->lang_begin = -1;
    sp->n_langs = 0;
    if (m->multilingual) {
        if (sp->translate < 0 || sp->transcribe < 0 || sp->translate <= sp->sot + 1)
            return sotto_err_set(err, SOTTO_E_FORMAT,
                                 "%s: multilingual model without <|translate|>/<|transcribe|>",
                                 m->dir);
        sp->lang_begin = sp->sot + 1;
        sp->n_langs = sp->translate - sp->lang_begin;
    }
    return SOTTO_OK;
}

/* Reads an int array field of config.json (CTranslate2 "suppress_ids"). */
static void read_default_suppress(sotto_model *m) {
    char path[4096], *text = NULL;
    if (sotto_path_join(path, sizeof path, m->dir, "config.json")) return;
    if (sotto_read_file(path, 1 << 24, &text, NULL, NULL)) return;
    cJSON *root = cJSON_Parse(text);
    free(text);
    if (!root) return;
    const cJSON *arr = cJSON_GetObjectItemCaseSensitive(root, "suppress_ids");
    if (cJSON_IsArray(arr)) {
        int n = cJSON_GetArraySize(arr);
        m->default_suppress = malloc(sizeof(int32_t) * (size_t)(n > 0 ? n : 1));
        if (m->default_suppress) {
            const cJSON *it;
            cJSON_ArrayForEach(it, arr) {
                if (cJSON_IsNumber(it) && it->valueint >= 0 && it->valueint < m->hp.n_vocab)
                    m->default_suppress[m->n_default_suppress++] = it->valueint;
            }
        }
    }
    cJSON_Delete(root);
}

/* Every linear layer must hold the format its part was asked for: a 4-bit
 * load that silently kept dense weights would use full memory while
 * claiming 4 bits. */
static int check_formats(const sotto_model *m, sotto_err *err) {
    for (int i = 0; i < m->n_slots; i++) {
        const sotto_slot *s = &m->slots[i];
        if (!s->is_matrix || !s->filled) continue;
        sotto_wfmt want = slot_fmt(m, s);
        if (s->mat->fmt != want)
            return sotto_err_set(err, SOTTO_E_FORMAT,
                                 "%s: %s holds %s weights but %s was asked for (%s)", m->dir,
                                 s->name, sotto_wfmt_name(s->mat->fmt), sotto_wfmt_name(want),
                                 s->policy_part >= 0 ? sotto_policy_part_name(s->policy_part)
                                                     : "dense part");
    }
    return SOTTO_OK;
}

/* VmHWM of this process in bytes, 0 if unknown. */
static size_t sotto_peak_rss(void) {
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return 0;
    char line[256];
    size_t kb = 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "VmHWM: %zu kB", &kb) == 1) break;
    fclose(f);
    return kb * 1024;
}

/* ---- load / free / accessors ----------------------------------------- */

sotto_model_params sotto_model_default_params(void) {
    sotto_model_params p;
    memset(&p, 0, sizeof p);
    p.format = SOTTO_MODEL_FORMAT_AUTO;
    p.weights = SOTTO_WFMT_DEFAULT;
    return p;
}

int sotto_model_formats_asked(const sotto_model *m) {
    return m->params.weights != SOTTO_WFMT_DEFAULT || (m->params.policy && *m->params.policy);
}

const char *sotto_device_name(sotto_device dev) {
    switch (dev) {
    case SOTTO_DEVICE_CPU: return "cpu";
    case SOTTO_DEVICE_AUTO: return "auto";
    case SOTTO_DEVICE_CUDA: return "cuda";
    }
    return "?";
}

int sotto_device_parse(const char *name, sotto_device *out) {
    static const sotto_device all[] = {SOTTO_DEVICE_CPU, SOTTO_DEVICE_AUTO, SOTTO_DEVICE_CUDA};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (name && !strcmp(name, sotto_device_name(all[i]))) {
            *out = all[i];
            return SOTTO_OK;
        }
    return SOTTO_E_INVALID;
}

int sotto_device_cuda_usable(char *desc, size_t desc_sz, char *why, size_t why_sz) {
    return sotto_gpu_probe(desc, desc_sz, why, why_sz);
}

int sotto_device_is_gpu(sotto_device dev) {
    if (dev == SOTTO_DEVICE_CUDA) return 1;
    if (dev != SOTTO_DEVICE_AUTO) return 0;
#ifdef SOTTO_CUDA_EMU
    return 0; /* auto never picks the emulation (place_model) */
#else
    char desc[128], why[256];
    return sotto_gpu_probe(desc, sizeof desc, why, sizeof why);
#endif
}

int sotto_device_memory(size_t *used, size_t *total, sotto_err *err) {
    return sotto_gpu_mem_info(used, total, err);
}

/* Puts a loaded model where params asked: the CPU, the GPU, or (AUTO) the
 * GPU when one is usable, else the CPU with one log line saying why. */
static int place_model(sotto_model *m, sotto_device dev, sotto_err *err) {
    m->device = SOTTO_DEVICE_CPU;
    snprintf(m->device_desc, sizeof m->device_desc, "cpu");
    if (dev == SOTTO_DEVICE_CPU) return SOTTO_OK;
    if (dev != SOTTO_DEVICE_AUTO && dev != SOTTO_DEVICE_CUDA)
        return sotto_err_set(err, SOTTO_E_INVALID, "unknown device %d", (int)dev);
    char desc[128], why[256];
#ifdef SOTTO_CUDA_EMU
    /* the CPU emulation of CUDA (tests) is there to be asked for by name:
     * auto, the CLI's and the server's default, never picks it */
    if (dev == SOTTO_DEVICE_AUTO) {
        static atomic_int said_emu;
        if (!atomic_exchange(&said_emu, 1))
            SOTTO_INFO("device auto: this build's CUDA is the CPU emulation (tests only); running on the CPU");
        return SOTTO_OK;
    }
#endif
    if (!sotto_gpu_probe(desc, sizeof desc, why, sizeof why)) {
        if (dev == SOTTO_DEVICE_CUDA)
            return sotto_err_set(err, SOTTO_E_UNSUPPORTED, "device cuda: no usable GPU: %s", why);
        static atomic_int said; /* once per process, not once per model */
        if (!atomic_exchange(&said, 1))
            SOTTO_INFO("device auto: no usable GPU (%s); running on the CPU", why);
        return SOTTO_OK;
    }
    const sotto_backend *be = sotto_backend_cuda(); /* probed: this build has it */
    if (!be) return sotto_err_set(err, SOTTO_E_INTERNAL, "the GPU probe passed in a build without CUDA");
    int rc = be->model_upload(m, err);
    if (rc) return rc;
    m->be = be;
    m->device = SOTTO_DEVICE_CUDA;
    snprintf(m->device_desc, sizeof m->device_desc, "%s", desc);
    double part[3];
    for (int i = 0; i < 3; i++) part[i] = be->model_part_bytes(m, i) / 1048576.0;
    SOTTO_INFO("%s: weights on %s: %.1f MiB (encoder %.1f, decoder %.1f, embedding %.1f)", m->dir,
               desc, part[0] + part[1] + part[2], part[0], part[1], part[2]);
    return SOTTO_OK;
}

sotto_device sotto_model_device(const sotto_model *m) { return m->device; }
const char *sotto_model_device_desc(const sotto_model *m) { return m->device_desc; }
size_t sotto_model_device_part_bytes(const sotto_model *m, int part) {
    return m->be->model_part_bytes(m, part);
}

/* CT2 or HF by the files in dir; AUTO (with err set) when neither is there. */
static sotto_model_format detect_format(const char *dir, sotto_err *err) {
    char path[4096];
    if (sotto_path_join(path, sizeof path, dir, "model.bin") == 0 && sotto_file_exists(path))
        return SOTTO_MODEL_FORMAT_CT2;
    if ((sotto_path_join(path, sizeof path, dir, "model.safetensors") == 0 && sotto_file_exists(path)) ||
        (sotto_path_join(path, sizeof path, dir, "model.safetensors.index.json") == 0 &&
         sotto_file_exists(path)))
        return SOTTO_MODEL_FORMAT_HF;
    sotto_err_set(err, SOTTO_E_NOTFOUND,
                  "%s: no model.bin (CTranslate2) or model.safetensors (Hugging Face) in this directory",
                  dir);
    return SOTTO_MODEL_FORMAT_AUTO;
}

int sotto_checkpoint_weights(const char *dir, sotto_wfmt *out, sotto_err *err) {
    sotto_model_format fmt = detect_format(dir, err);
    if (fmt == SOTTO_MODEL_FORMAT_AUTO) return SOTTO_E_NOTFOUND;
    if (fmt == SOTTO_MODEL_FORMAT_HF) {
        *out = SOTTO_WFMT_F32; /* as sotto_load_hf's default */
        return SOTTO_OK;
    }
    return sotto_ct2_ckpt_weights(dir, out, err);
}

sotto_model *sotto_model_load(const char *dir, const sotto_model_params *params, sotto_err *err) {
    sotto_model_params p = params ? *params : sotto_model_default_params();
    sotto_model *m = calloc(1, sizeof *m);
    if (!m) {
        sotto_err_set(err, SOTTO_E_NOMEM, "out of memory");
        return NULL;
    }
    m->be = &sotto_backend_cpu; /* place_model may move it */
    m->params = p;
    m->dir = strdup(dir);
    if (!m->dir) {
        sotto_err_set(err, SOTTO_E_NOMEM, "out of memory");
        goto fail;
    }
    sotto_model_format fmt = p.format;
    if (fmt == SOTTO_MODEL_FORMAT_AUTO && (fmt = detect_format(dir, err)) == SOTTO_MODEL_FORMAT_AUTO)
        goto fail;
    if (p.weights != SOTTO_WFMT_DEFAULT && ((int)p.weights < 0 || p.weights >= SOTTO_WFMT_COUNT)) {
        sotto_err_set(err, SOTTO_E_INVALID, "unknown weight format %d", (int)p.weights);
        goto fail;
    }
    /* the policy's syntax is checked now; its size-dependent default is
     * chosen by the reader once the dimensions are known */
    if (sotto_policy_resolve(&m->policy, sotto_model_asked_weights(m), 0, p.policy, err)) goto fail;
    if (p.calib && !(m->calib = sotto_calib_load(p.calib, err))) goto fail;
    int rc = fmt == SOTTO_MODEL_FORMAT_CT2 ? sotto_load_ct2(m, dir, err) : sotto_load_hf(m, dir, err);
    if (rc) goto fail;
    /* after the weights: a damaged checkpoint is refused without parsing the
     * ~50k-entry vocabulary and merges first */
    m->tok = sotto_tokenizer_load_dir(dir, err);
    if (!m->tok) goto fail;
    m->format_name = fmt == SOTTO_MODEL_FORMAT_CT2 ? "ct2" : "hf";
    sotto_calib_free(m->calib);
    m->calib = NULL;
    /* a checkpoint that set its layers' formats one by one, all alike, reads as one part */
    sotto_policy_compact(&m->policy, m->hp.n_audio_layer, m->hp.n_text_layer);
    if (check_formats(m, err)) goto fail;
    if (resolve_special(m, err)) goto fail;
    if (sotto_tokenizer_n_vocab(m->tok) > m->hp.n_vocab + 1)
        SOTTO_WARN("%s: tokenizer knows %d ids but the model has %d", dir,
                   sotto_tokenizer_n_vocab(m->tok), m->hp.n_vocab);
    read_default_suppress(m);
    m->mel = sotto_mel_create(m->hp.n_mels, err);
    if (!m->mel) goto fail;
    if (!m->borrows_map) sotto_mapfile_close(&m->map);
    if (place_model(m, p.device, err)) goto fail;
    m->load_peak_rss = sotto_peak_rss();
    SOTTO_DEBUG("loaded %s (%s): %d mels, width %d, %d+%d layers, %d heads, vocab %d", dir,
                m->format_name, m->hp.n_mels, m->hp.n_audio_state, m->hp.n_audio_layer,
                m->hp.n_text_layer, m->hp.n_audio_head, m->hp.n_vocab);
    return m;
fail:
    sotto_model_free(m);
    return NULL;
}

void sotto_model_free(sotto_model *m) {
    if (!m) return;
    sotto_calib_free(m->calib);
    if (m->be->model_free) m->be->model_free(m);
    for (int i = 0; i < m->n_owned; i++) free(m->owned[i]);
    free(m->owned);
    sotto_mapfile_close(&m->map);
    sotto_tokenizer_free(m->tok);
    sotto_mel_free(m->mel);
    free(m->enc);
    free(m->dec);
    free(m->slots);
    free(m->default_suppress);
    free(m->dir);
    free(m);
}

const sotto_hparams *sotto_model_hparams(const sotto_model *m) { return &m->hp; }
const sotto_special_tokens *sotto_model_special(const sotto_model *m) { return &m->sp; }
const sotto_tokenizer *sotto_model_tokenizer(const sotto_model *m) { return m->tok; }
const sotto_mel *sotto_model_mel(const sotto_model *m) { return m->mel; }
int sotto_model_is_multilingual(const sotto_model *m) { return m->multilingual; }
const char *sotto_model_format_name(const sotto_model *m) { return m->format_name; }
const char *sotto_model_dir(const sotto_model *m) { return m->dir; }

const int32_t *sotto_model_default_suppress(const sotto_model *m, int *n) {
    *n = m->n_default_suppress;
    return m->default_suppress;
}

size_t sotto_model_part_bytes(const sotto_model *m, int part) {
    return part >= 0 && part < SOTTO_PART_COUNT ? m->part_bytes[part] : 0;
}

void sotto_model_policy_string(const sotto_model *m, char *buf, size_t bufsz) {
    sotto_policy_format(&m->policy, buf, bufsz);
}

size_t sotto_model_load_peak_rss(const sotto_model *m) { return m->load_peak_rss; }
size_t sotto_model_largest_tensor(const sotto_model *m) { return m->largest_tensor; }
int sotto_model_is_snapshot(const sotto_model *m) { return m->from_snapshot; }

size_t sotto_model_weight_bytes(const sotto_model *m) {
    size_t s = 0;
    for (int i = 0; i < SOTTO_PART_COUNT; i++) s += m->part_bytes[i];
    return s;
}
