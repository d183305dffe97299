/* model.c - the model builder (slot table, tensor conversion, memory
 * accounting) and model loading / accessors. */
#define _POSIX_C_SOURCE 200809L
#include "model.h"

#include "half.h"
#include "log.h"

#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

size_t sotto_dtype_size(sotto_dtype dt) {
    switch (dt) {
    case SOTTO_DT_F32: return 4;
    case SOTTO_DT_F16: return 2;
    case SOTTO_DT_BF16: return 2;
    case SOTTO_DT_I8: return 1;
    case SOTTO_DT_I16: return 2;
    case SOTTO_DT_I32: return 4;
    case SOTTO_DT_U8: return 1;
    default: return 0;
    }
}

const char *sotto_dtype_name(sotto_dtype dt) {
    static const char *names[] = {"float32", "float16", "bfloat16", "int8",
                                  "int16",   "int32",   "uint8",    "other"};
    return names[dt <= SOTTO_DT_OTHER ? dt : SOTTO_DT_OTHER];
}

/* ---- slot table ------------------------------------------------------ */

typedef struct slot_builder {
    sotto_model *m;
    int n;
} slot_builder;

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
    add_slot(&sb, "dec.emb", hp->n_vocab, dt, 1, SOTTO_PART_EMBED, &m->tok_emb, NULL);
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
    const size_t n = (size_t)(s->rows * s->cols);
    const float *data = NULL;
    const unsigned char *p = (const unsigned char *)src->data + (size_t)(row0 * src->cols) * 4;
    int in_map = m->map.data && p >= m->map.data && p + n * 4 <= m->map.data + m->map.size;
    if (src->dtype == SOTTO_DT_F32 && !src->row_scale && in_map && ((uintptr_t)p & 3u) == 0) {
        data = (const float *)p; /* borrowed from the mapping */
        m->borrows_map = 1;
    } else {
        float *buf = model_alloc(m, n * sizeof(float));
        if (!buf) return sotto_err_set(err, SOTTO_E_NOMEM, "out of memory for tensor %s", name);
        int rc = convert_to_f32(src, row0, rows, buf, err);
        if (rc) return rc;
        data = buf;
    }
    for (size_t i = 0; i < n; i++) {
        if (!(data[i] - data[i] == 0.0f)) /* NaN or Inf */
            return sotto_err_set(err, SOTTO_E_FORMAT,
                                 "%s: tensor '%s' holds a non-finite value at element %zu",
                                 src->file, src->name, i);
    }
    if (s->is_matrix) {
        s->mat->fmt = SOTTO_WFMT_F32;
        s->mat->rows = (int32_t)s->rows;
        s->mat->cols = (int32_t)s->cols;
        s->mat->data = data;
    } else {
        *s->vec = data;
    }
    s->filled = 1;
    m->part_bytes[s->part] += n * sizeof(float);
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

/* ---- load / free / accessors ----------------------------------------- */

sotto_model_params sotto_model_default_params(void) {
    sotto_model_params p;
    memset(&p, 0, sizeof p);
    p.format = SOTTO_MODEL_FORMAT_AUTO;
    p.weights = SOTTO_WFMT_F32;
    return p;
}

sotto_model *sotto_model_load(const char *dir, const sotto_model_params *params, sotto_err *err) {
    sotto_model_params p = params ? *params : sotto_model_default_params();
    sotto_model *m = calloc(1, sizeof *m);
    if (!m) {
        sotto_err_set(err, SOTTO_E_NOMEM, "out of memory");
        return NULL;
    }
    m->params = p;
    m->dir = strdup(dir);
    if (!m->dir) {
        sotto_err_set(err, SOTTO_E_NOMEM, "out of memory");
        goto fail;
    }
    char path[4096];
    sotto_model_format fmt = p.format;
    if (fmt == SOTTO_MODEL_FORMAT_AUTO) {
        if (sotto_path_join(path, sizeof path, dir, "model.bin") == 0 && sotto_file_exists(path))
            fmt = SOTTO_MODEL_FORMAT_CT2;
        else if ((sotto_path_join(path, sizeof path, dir, "model.safetensors") == 0 &&
                  sotto_file_exists(path)) ||
                 (sotto_path_join(path, sizeof path, dir, "model.safetensors.index.json") == 0 &&
                  sotto_file_exists(path)))
            fmt = SOTTO_MODEL_FORMAT_HF;
        else {
            sotto_err_set(err, SOTTO_E_NOTFOUND,
                          "%s: no model.bin (CTranslate2) or model.safetensors (Hugging Face) "
                          "in this directory",
                          dir);
            goto fail;
        }
    }
    if (p.weights != SOTTO_WFMT_F32) {
        sotto_err_set(err, SOTTO_E_UNSUPPORTED, "weight format %s is not available yet",
                      sotto_wfmt_name(p.weights));
        goto fail;
    }
    m->tok = sotto_tokenizer_load_dir(dir, err);
    if (!m->tok) goto fail;
    int rc = fmt == SOTTO_MODEL_FORMAT_CT2 ? sotto_load_ct2(m, dir, err) : sotto_load_hf(m, dir, err);
    if (rc) goto fail;
    m->format_name = fmt == SOTTO_MODEL_FORMAT_CT2 ? "ct2" : "hf";
    m->proj.fmt = SOTTO_WFMT_F32;
    m->proj.rows = m->hp.n_vocab;
    m->proj.cols = m->hp.n_text_state;
    m->proj.data = m->tok_emb;
    if (resolve_special(m, err)) goto fail;
    if (sotto_tokenizer_n_vocab(m->tok) > m->hp.n_vocab + 1)
        SOTTO_WARN("%s: tokenizer knows %d ids but the model has %d", dir,
                   sotto_tokenizer_n_vocab(m->tok), m->hp.n_vocab);
    read_default_suppress(m);
    m->mel = sotto_mel_create(m->hp.n_mels, err);
    if (!m->mel) goto fail;
    if (!m->borrows_map) sotto_mapfile_close(&m->map);
    free(m->slots);
    m->slots = NULL;
    m->n_slots = 0;
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

size_t sotto_model_weight_bytes(const sotto_model *m) {
    size_t s = 0;
    for (int i = 0; i < SOTTO_PART_COUNT; i++) s += m->part_bytes[i];
    return s;
}
