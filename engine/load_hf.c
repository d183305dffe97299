/* load_hf.c - reader for Hugging Face Whisper directories:
 * config.json + model.safetensors (or model.safetensors.index.json with
 * shards). Float32 tensors are used in place from the memory mapping when
 * aligned; others are converted (and quantized per the model's policy).
 *
 * Pre-quantized linear layers are recognised by their tensor names:
 *   NVFP4 (compressed-tensors): X.weight_packed, X.weight_scale (F8_E4M3),
 *                               X.weight_global_scale
 *   NF4 (bitsandbytes):         X.weight (U8), X.weight.absmax,
 *                               X.weight.quant_map,
 *                               X.weight.quant_state.bitsandbytes__nf4 [,
 *                               X.weight.nested_absmax, .nested_quant_map]
 *   Q8 (sotto):                 X.weight (I8), X.weight_scale (F32 per 32)
 * A directory with sotto_quant.json is a sotto snapshot (see snapshot.h):
 * its policy is adopted and every tensor's CRC-32 is verified.
 */
#define _POSIX_C_SOURCE 200809L
#include "log.h"
#include "model.h"
#include "quant.h"
#include "safetensors.h"
#include "snapshot.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cfg_int(const cJSON *cfg, const char *key, int32_t *out, const char *path,
                   sotto_err *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(cfg, key);
    if (!cJSON_IsNumber(v) || v->valuedouble < 1 || v->valuedouble > 1e7)
        return sotto_err_set(err, SOTTO_E_FORMAT, "%s: missing or invalid \"%s\"", path, key);
    *out = (int32_t)v->valuedouble;
    return SOTTO_OK;
}

static int read_config(sotto_model *m, const char *dir, sotto_err *err) {
    char path[4096], *text = NULL;
    if (sotto_path_join(path, sizeof path, dir, "config.json"))
        return sotto_err_set(err, SOTTO_E_RANGE, "path too long");
    int rc = sotto_read_file(path, 1 << 24, &text, NULL, err);
    if (rc) return rc;
    cJSON *cfg = cJSON_Parse(text);
    free(text);
    if (!cfg || !cJSON_IsObject(cfg)) {
        cJSON_Delete(cfg);
        return sotto_err_set(err, SOTTO_E_FORMAT, "%s: not valid JSON", path);
    }
    sotto_hparams *hp = &m->hp;
    const cJSON *mt = cJSON_GetObjectItemCaseSensitive(cfg, "model_type");
    if (cJSON_IsString(mt) && strcmp(mt->valuestring, "whisper") != 0) {
        rc = sotto_err_set(err, SOTTO_E_UNSUPPORTED, "%s: model_type \"%s\", not \"whisper\"", path,
                           mt->valuestring);
        goto done;
    }
    if ((rc = cfg_int(cfg, "d_model", &hp->n_audio_state, path, err)) ||
        (rc = cfg_int(cfg, "encoder_layers", &hp->n_audio_layer, path, err)) ||
        (rc = cfg_int(cfg, "encoder_attention_heads", &hp->n_audio_head, path, err)) ||
        (rc = cfg_int(cfg, "encoder_ffn_dim", &hp->n_audio_ff, path, err)) ||
        (rc = cfg_int(cfg, "decoder_layers", &hp->n_text_layer, path, err)) ||
        (rc = cfg_int(cfg, "decoder_attention_heads", &hp->n_text_head, path, err)) ||
        (rc = cfg_int(cfg, "decoder_ffn_dim", &hp->n_text_ff, path, err)) ||
        (rc = cfg_int(cfg, "num_mel_bins", &hp->n_mels, path, err)) ||
        (rc = cfg_int(cfg, "vocab_size", &hp->n_vocab, path, err)) ||
        (rc = cfg_int(cfg, "max_source_positions", &hp->n_audio_ctx, path, err)) ||
        (rc = cfg_int(cfg, "max_target_positions", &hp->n_text_ctx, path, err)))
        goto done;
    hp->n_text_state = hp->n_audio_state;
done:
    cJSON_Delete(cfg);
    return rc;
}

/* ---- names -------------------------------------------------------------- */

static const struct {
    const char *hf, *canon;
} k_globals[] = {
    {"encoder.conv1.weight", "enc.conv1.w"},
    {"encoder.conv1.bias", "enc.conv1.b"},
    {"encoder.conv2.weight", "enc.conv2.w"},
    {"encoder.conv2.bias", "enc.conv2.b"},
    {"encoder.embed_positions.weight", "enc.pos"},
    {"encoder.layer_norm.weight", "enc.ln.g"},
    {"encoder.layer_norm.bias", "enc.ln.b"},
    {"decoder.embed_tokens.weight", "dec.emb"},
    {"decoder.embed_positions.weight", "dec.pos"},
    {"decoder.layer_norm.weight", "dec.ln.g"},
    {"decoder.layer_norm.bias", "dec.ln.b"},
};

static const struct {
    const char *hf, *canon;
} k_layer[] = {
    {"self_attn_layer_norm.weight", "attn_ln.g"},
    {"self_attn_layer_norm.bias", "attn_ln.b"},
    {"self_attn.q_proj.weight", "q.w"},
    {"self_attn.q_proj.bias", "q.b"},
    {"self_attn.k_proj.weight", "k.w"},
    {"self_attn.k_proj.bias", "k.b"},
    {"self_attn.v_proj.weight", "v.w"},
    {"self_attn.v_proj.bias", "v.b"},
    {"self_attn.out_proj.weight", "o.w"},
    {"self_attn.out_proj.bias", "o.b"},
    {"encoder_attn_layer_norm.weight", "cross_ln.g"},
    {"encoder_attn_layer_norm.bias", "cross_ln.b"},
    {"encoder_attn.q_proj.weight", "cq.w"},
    {"encoder_attn.q_proj.bias", "cq.b"},
    {"encoder_attn.k_proj.weight", "ck.w"},
    {"encoder_attn.k_proj.bias", "ck.b"},
    {"encoder_attn.v_proj.weight", "cv.w"},
    {"encoder_attn.v_proj.bias", "cv.b"},
    {"encoder_attn.out_proj.weight", "co.w"},
    {"encoder_attn.out_proj.bias", "co.b"},
    {"final_layer_norm.weight", "mlp_ln.g"},
    {"final_layer_norm.bias", "mlp_ln.b"},
    {"fc1.weight", "fc1.w"},
    {"fc1.bias", "fc1.b"},
    {"fc2.weight", "fc2.w"},
    {"fc2.bias", "fc2.b"},
};

/* HF name (with or without the "model." prefix) -> canonical name. */
static int hf_canon(const char *name, char *out, size_t outsz) {
    if (strncmp(name, "model.", 6) == 0) name += 6;
    for (size_t i = 0; i < sizeof k_globals / sizeof k_globals[0]; i++) {
        if (strcmp(name, k_globals[i].hf) == 0) {
            snprintf(out, outsz, "%s", k_globals[i].canon);
            return 1;
        }
    }
    char side[16];
    int idx, consumed = 0;
    if (sscanf(name, "%15[a-z].layers.%d.%n", side, &idx, &consumed) == 2 && consumed > 0 &&
        (strcmp(side, "encoder") == 0 || strcmp(side, "decoder") == 0)) {
        for (size_t i = 0; i < sizeof k_layer / sizeof k_layer[0]; i++) {
            if (strcmp(name + consumed, k_layer[i].hf) == 0) {
                snprintf(out, outsz, "%s.%d.%s", side[0] == 'e' ? "enc" : "dec", idx,
                         k_layer[i].canon);
                return 1;
            }
        }
    }
    return 0;
}

int sotto_hf_name(const char *canon, char *buf, size_t bufsz) {
    for (size_t i = 0; i < sizeof k_globals / sizeof k_globals[0]; i++) {
        if (strcmp(canon, k_globals[i].canon) == 0) {
            snprintf(buf, bufsz, "model.%s", k_globals[i].hf);
            return SOTTO_OK;
        }
    }
    char side[4];
    int idx, consumed = 0;
    if (sscanf(canon, "%3[a-z].%d.%n", side, &idx, &consumed) == 2 && consumed > 0) {
        for (size_t i = 0; i < sizeof k_layer / sizeof k_layer[0]; i++) {
            if (strcmp(canon + consumed, k_layer[i].canon) == 0) {
                snprintf(buf, bufsz, "model.%s.layers.%d.%s",
                         strcmp(side, "enc") == 0 ? "encoder" : "decoder", idx, k_layer[i].hf);
                return SOTTO_OK;
            }
        }
    }
    return SOTTO_E_NOTFOUND;
}

static int ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

/* ---- tensors -------------------------------------------------------------- */

typedef struct hf_load {
    sotto_model *m;
    cJSON *recipe; /* snapshot recipe or NULL */
} hf_load;

/* 1 if `name` is part of a pre-quantized set handled by put_quant_sets. */
static int is_quant_member(const sotto_st_file *f, const char *name) {
    static const char *const suffixes[] = {".weight_packed", ".weight_scale",
                                           ".weight_global_scale", ".weight.absmax",
                                           ".weight.quant_map", ".weight.nested_absmax",
                                           ".weight.nested_quant_map",
                                           ".weight.quant_state.bitsandbytes__nf4",
                                           ".input_global_scale"};
    for (size_t i = 0; i < sizeof suffixes / sizeof suffixes[0]; i++)
        if (ends_with(name, suffixes[i])) return 1;
    if (ends_with(name, ".weight")) { /* the code tensor of an NF4 or Q8 set */
        char key[512];
        snprintf(key, sizeof key, "%s.quant_state.bitsandbytes__nf4", name);
        if (cJSON_GetObjectItemCaseSensitive(f->header, key)) return 1;
        snprintf(key, sizeof key, "%s_scale", name);
        const cJSON *it = cJSON_GetObjectItemCaseSensitive(f->header, name);
        const cJSON *dt = it ? cJSON_GetObjectItemCaseSensitive(it, "dtype") : NULL;
        if (cJSON_GetObjectItemCaseSensitive(f->header, key) && cJSON_IsString(dt) &&
            strcmp(dt->valuestring, "I8") == 0)
            return 1;
    }
    return 0;
}

static int verify_crc(const hf_load *L, const sotto_st_file *f, const sotto_st_tensor *t,
                      sotto_err *err) {
    if (!L->recipe) return SOTTO_OK;
    return sotto_snapshot_check_tensor(L->recipe, f->path, t->name, t->data, t->nbytes, err);
}

static int get_checked(const hf_load *L, const sotto_st_file *f, const char *name,
                       sotto_dtype want, int64_t count, sotto_st_tensor *t, sotto_err *err) {
    int rc = sotto_st_get(f, name, t, err);
    if (rc == SOTTO_E_NOTFOUND)
        return sotto_err_set(err, SOTTO_E_FORMAT, "%s: quantized set without '%s'", f->path, name);
    if (rc) return rc;
    if (t->dtype != want || (count >= 0 && t->count != count))
        return sotto_err_set(err, SOTTO_E_FORMAT,
                             "%s: '%s' should be %s with %lld elements, it is %s with %lld",
                             f->path, name, sotto_st_dtype_name(want), (long long)count,
                             sotto_st_dtype_name(t->dtype), (long long)t->count);
    return verify_crc(L, f, t, err);
}

static int put_nvfp4(hf_load *L, const sotto_st_file *f, const char *base, const char *canon,
                     sotto_err *err) {
    char name[576]; /* base (< 512) + the longest suffix */
    sotto_st_tensor tp, ts, tg;
    snprintf(name, sizeof name, "%s.weight_packed", base);
    int rc = get_checked(L, f, name, SOTTO_DT_U8, -1, &tp, err);
    if (rc) return rc;
    if (tp.rank != 2)
        return sotto_err_set(err, SOTTO_E_FORMAT, "%s: '%s' must be 2-D", f->path, name);
    int64_t rows = tp.dims[0], cols = tp.dims[1] * 2;
    snprintf(name, sizeof name, "%s.weight_scale", base);
    if ((rc = get_checked(L, f, name, SOTTO_DT_F8E4M3, rows * (cols / 16), &ts, err))) return rc;
    snprintf(name, sizeof name, "%s.weight_global_scale", base);
    if ((rc = get_checked(L, f, name, SOTTO_DT_F32, 1, &tg, err))) return rc;
    float g;
    memcpy(&g, tg.data, 4);
    if (!(g > 0.0f) || !(g < 3.4e38f))
        return sotto_err_set(err, SOTTO_E_FORMAT, "%s: '%s' is %g, not a positive scale", f->path,
                             name, g);
    sotto_wmat w = {SOTTO_WFMT_NVFP4, (int32_t)rows, (int32_t)cols, tp.data, ts.data, NULL, 1.0f / g};
    return sotto_model_put_quantized(L->m, canon, &w, f->path, err);
}

static int put_nf4(hf_load *L, const sotto_st_file *f, const char *base, const char *canon,
                   sotto_err *err) {
    char name[576]; /* base (< 512) + the longest suffix */
    sotto_st_tensor tq, tstate, tmap, tabs;
    snprintf(name, sizeof name, "%s.weight.quant_state.bitsandbytes__nf4", base);
    int rc = get_checked(L, f, name, SOTTO_DT_U8, -1, &tstate, err);
    if (rc) return rc;
    cJSON *st = cJSON_ParseWithLength((const char *)tstate.data, tstate.nbytes);
    const cJSON *qt = st ? cJSON_GetObjectItemCaseSensitive(st, "quant_type") : NULL;
    const cJSON *bs = st ? cJSON_GetObjectItemCaseSensitive(st, "blocksize") : NULL;
    const cJSON *shape = st ? cJSON_GetObjectItemCaseSensitive(st, "shape") : NULL;
    const cJSON *off = st ? cJSON_GetObjectItemCaseSensitive(st, "nested_offset") : NULL;
    int64_t rows = 0, cols = 0;
    if (!cJSON_IsString(qt) || strcmp(qt->valuestring, "nf4") != 0 || !cJSON_IsNumber(bs) ||
        bs->valueint != 64 || !cJSON_IsArray(shape) || cJSON_GetArraySize(shape) != 2) {
        cJSON_Delete(st);
        return sotto_err_set(err, SOTTO_E_UNSUPPORTED,
                             "%s: '%s' is not an NF4 quant state with blocks of 64", f->path, name);
    }
    const cJSON *d0 = cJSON_GetArrayItem(shape, 0), *d1 = cJSON_GetArrayItem(shape, 1);
    /* in range before the cast: a double past int64's range converts with undefined behaviour */
    if (cJSON_IsNumber(d0) && d0->valuedouble >= 1 && d0->valuedouble <= (1 << 20))
        rows = (int64_t)d0->valuedouble;
    if (cJSON_IsNumber(d1) && d1->valuedouble >= 1 && d1->valuedouble <= (1 << 20))
        cols = (int64_t)d1->valuedouble;
    int nested = cJSON_IsNumber(off);
    float offset = nested ? (float)off->valuedouble : 0.0f;
    cJSON_Delete(st);
    if (rows < 1 || cols < 64 || cols % 64)
        return sotto_err_set(err, SOTTO_E_FORMAT, "%s: NF4 shape of %s is not [rows, 64k]", f->path,
                             base);
    const int64_t n = rows * cols, nb = n / 64;
    snprintf(name, sizeof name, "%s.weight", base);
    if ((rc = get_checked(L, f, name, SOTTO_DT_U8, n / 2, &tq, err))) return rc;
    snprintf(name, sizeof name, "%s.weight.quant_map", base);
    if ((rc = get_checked(L, f, name, SOTTO_DT_F32, 16, &tmap, err))) return rc;
    for (int i = 0; i < 16; i++) {
        float v;
        memcpy(&v, (const float *)tmap.data + i, 4);
        if (v != sotto_nf4_code[i])
            return sotto_err_set(err, SOTTO_E_UNSUPPORTED,
                                 "%s: %s uses a 4-bit code table other than NF4", f->path, base);
    }
    snprintf(name, sizeof name, "%s.weight.absmax", base);
    if ((rc = get_checked(L, f, name, nested ? SOTTO_DT_U8 : SOTTO_DT_F32, nb, &tabs, err)))
        return rc;
    float *absmax = NULL;
    const void *scales = tabs.data;
    sotto_nf4_dq dq = {NULL, NULL, 0.0f};
    if (nested) { /* bitsandbytes double quantization */
        sotto_st_tensor tna, tnm;
        snprintf(name, sizeof name, "%s.weight.nested_absmax", base);
        if ((rc = get_checked(L, f, name, SOTTO_DT_F32, (nb + 255) / 256, &tna, err))) return rc;
        snprintf(name, sizeof name, "%s.weight.nested_quant_map", base);
        if ((rc = get_checked(L, f, name, SOTTO_DT_F32, 256, &tnm, err))) return rc;
        if (memcmp(tnm.data, sotto_dyn8_code, sizeof sotto_dyn8_code) == 0) {
            /* the standard dynamic map: keep the 8-bit codes (the kernels
             * decode them per block) */
            dq.codes = tabs.data;
            dq.nested_absmax = tna.data; /* copied by the builder */
            dq.offset = offset;
            scales = NULL;
        } else { /* another map (old bitsandbytes builds): decode to floats */
            absmax = malloc(sizeof(float) * (size_t)nb);
            if (!absmax) return sotto_err_set(err, SOTTO_E_NOMEM, "out of memory");
            const uint8_t *codes = tabs.data;
            for (int64_t b = 0; b < nb; b++) {
                float code, scale;
                memcpy(&code, (const float *)tnm.data + codes[b], 4);
                memcpy(&scale, (const float *)tna.data + b / 256, 4);
                volatile float prod = code * scale; /* round like bitsandbytes: no FMA */
                absmax[b] = prod + offset;
            }
            scales = absmax;
        }
    }
    sotto_wmat w = {SOTTO_WFMT_NF4, (int32_t)rows, (int32_t)cols, tq.data, scales,
                    dq.codes ? &dq : NULL, 0.0f};
    rc = sotto_model_put_quantized(L->m, canon, &w, f->path, err);
    free(absmax);
    return rc;
}

static int put_q8(hf_load *L, const sotto_st_file *f, const char *base, const char *canon,
                  sotto_err *err) {
    char name[576]; /* base (< 512) + the longest suffix */
    sotto_st_tensor tq, ts;
    snprintf(name, sizeof name, "%s.weight", base);
    int rc = get_checked(L, f, name, SOTTO_DT_I8, -1, &tq, err);
    if (rc) return rc;
    if (tq.rank != 2 || tq.dims[1] % 32)
        return sotto_err_set(err, SOTTO_E_FORMAT, "%s: Q8 '%s' must be [rows, 32k]", f->path, name);
    snprintf(name, sizeof name, "%s.weight_scale", base);
    if ((rc = get_checked(L, f, name, SOTTO_DT_F32, tq.dims[0] * (tq.dims[1] / 32), &ts, err)))
        return rc;
    sotto_wmat w = {SOTTO_WFMT_Q8, (int32_t)tq.dims[0], (int32_t)tq.dims[1], tq.data, ts.data, NULL,
                    0.0f};
    return sotto_model_put_quantized(L->m, canon, &w, f->path, err);
}

/* Pre-quantized sets first, then every dense tensor. */
static int put_file(hf_load *L, const sotto_st_file *f, sotto_err *err) {
    const cJSON *item;
    int rc = SOTTO_OK;
    cJSON_ArrayForEach(item, f->header) {
        const char *nm = item->string;
        char base[512], canon[48], wname[520];
        if (strcmp(nm, "__metadata__") == 0) continue;
        int kind = 0; /* 1 nvfp4, 2 nf4, 3 q8 */
        size_t len = strlen(nm);
        if (ends_with(nm, ".weight_packed")) {
            kind = 1;
            len -= strlen(".weight_packed");
        } else if (ends_with(nm, ".weight.quant_state.bitsandbytes__nf4")) {
            kind = 2;
            len -= strlen(".weight.quant_state.bitsandbytes__nf4");
        } else if (ends_with(nm, ".weight_scale")) {
            len -= strlen(".weight_scale");
            snprintf(wname, sizeof wname, "%.*s.weight_packed", (int)len, nm);
            if (!cJSON_GetObjectItemCaseSensitive(f->header, wname)) kind = 3;
        }
        if (!kind) continue;
        if (len >= sizeof base)
            return sotto_err_set(err, SOTTO_E_FORMAT, "%s: tensor name too long", f->path);
        memcpy(base, nm, len);
        base[len] = '\0';
        snprintf(wname, sizeof wname, "%s.weight", base);
        if (!hf_canon(wname, canon, sizeof canon))
            return sotto_err_set(err, SOTTO_E_FORMAT, "%s: quantized tensor '%s' is not a Whisper weight",
                                 f->path, base);
        rc = kind == 1 ? put_nvfp4(L, f, base, canon, err)
             : kind == 2 ? put_nf4(L, f, base, canon, err)
                         : put_q8(L, f, base, canon, err);
        if (rc) return rc;
    }
    cJSON_ArrayForEach(item, f->header) {
        const char *nm = item->string;
        if (strcmp(nm, "__metadata__") == 0 || is_quant_member(f, nm)) continue;
        char canon[48];
        if (!hf_canon(nm, canon, sizeof canon)) {
            if (strcmp(nm, "proj_out.weight") != 0) /* tied to the embedding */
                SOTTO_DEBUG("%s: ignoring tensor '%s'", f->path, nm);
            continue;
        }
        sotto_st_tensor t;
        if ((rc = sotto_st_item(f, item, &t, err))) return rc;
        if (t.dtype != SOTTO_DT_F32 && t.dtype != SOTTO_DT_F16 && t.dtype != SOTTO_DT_BF16)
            return sotto_err_set(err, SOTTO_E_UNSUPPORTED, "%s: tensor '%s' has an unsupported type",
                                 f->path, nm);
        if ((rc = verify_crc(L, f, &t, err))) return rc;
        /* vectors are [1 x n]; conv weights [out][in][k] flatten to [out][in*k] */
        sotto_src_tensor src = {f->path, nm, t.dtype, 1, t.count, t.data, NULL};
        if (t.rank > 1) {
            src.rows = t.dims[0];
            src.cols = t.dims[0] ? t.count / t.dims[0] : 0;
        }
        if ((rc = sotto_model_put(L->m, canon, &src, 0, 0, err))) return rc;
    }
    return SOTTO_OK;
}

/* Shard file names listed in model.safetensors.index.json, or just
 * model.safetensors. Returns a malloc'd array of names (each malloc'd). */
static int list_shards(const char *dir, char ***names, int *n, sotto_err *err) {
    char path[4096], *text = NULL;
    *names = NULL;
    *n = 0;
    if (sotto_path_join(path, sizeof path, dir, "model.safetensors.index.json"))
        return sotto_err_set(err, SOTTO_E_RANGE, "path too long");
    if (!sotto_file_exists(path)) {
        *names = malloc(sizeof(char *));
        if (!*names || !((*names)[0] = strdup("model.safetensors")))
            return sotto_err_set(err, SOTTO_E_NOMEM, "out of memory");
        *n = 1;
        return SOTTO_OK;
    }
    int rc = sotto_read_file(path, 1 << 26, &text, NULL, err);
    if (rc) return rc;
    cJSON *root = cJSON_Parse(text);
    free(text);
    const cJSON *wm = root ? cJSON_GetObjectItemCaseSensitive(root, "weight_map") : NULL;
    if (!cJSON_IsObject(wm)) {
        cJSON_Delete(root);
        return sotto_err_set(err, SOTTO_E_FORMAT, "%s: no \"weight_map\" object", path);
    }
    int cap = cJSON_GetArraySize(wm);
    *names = calloc((size_t)(cap ? cap : 1), sizeof(char *));
    if (!*names) {
        cJSON_Delete(root);
        return sotto_err_set(err, SOTTO_E_NOMEM, "out of memory");
    }
    const cJSON *it;
    cJSON_ArrayForEach(it, wm) {
        if (!cJSON_IsString(it) || strchr(it->valuestring, '/')) {
            rc = sotto_err_set(err, SOTTO_E_FORMAT, "%s: bad shard name for '%s'", path, it->string);
            break;
        }
        int seen = 0;
        for (int i = 0; i < *n; i++) seen |= strcmp((*names)[i], it->valuestring) == 0;
        if (!seen && !((*names)[(*n)++] = strdup(it->valuestring))) {
            rc = sotto_err_set(err, SOTTO_E_NOMEM, "out of memory");
            break;
        }
    }
    cJSON_Delete(root);
    return rc;
}

int sotto_load_hf(sotto_model *m, const char *dir, sotto_err *err) {
    char **shards = NULL;
    int n_shards = 0;
    hf_load L = {m, NULL};
    int rc = read_config(m, dir, err);
    if (rc) return rc;
    if ((rc = sotto_model_choose_policy(m, err))) return rc;
    if ((rc = sotto_snapshot_read_recipe(m, dir, &L.recipe, err))) return rc;
    if ((rc = sotto_model_alloc_slots(m, err))) goto done;
    if ((rc = list_shards(dir, &shards, &n_shards, err))) goto done;
    for (int i = 0; i < n_shards && rc == 0; i++) {
        char path[4096];
        if (sotto_path_join(path, sizeof path, dir, shards[i])) {
            rc = sotto_err_set(err, SOTTO_E_RANGE, "path too long");
            break;
        }
        /* The single-file case keeps its mapping in the model so that
         * tensors can be used in place; shards are copied and unmapped. */
        sotto_mapfile tmp = {0};
        sotto_mapfile *map = n_shards == 1 ? &m->map : &tmp;
        sotto_st_file f;
        memset(&f, 0, sizeof f);
        rc = sotto_mapfile_open(path, map, err);
        if (rc == 0) rc = sotto_st_open(&f, path, map, err);
        if (rc == 0) rc = put_file(&L, &f, err);
        sotto_st_close(&f);
        sotto_mapfile_close(&tmp);
    }
    if (rc == 0) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, n_shards == 1 ? shards[0] : "model-*.safetensors");
        rc = sotto_model_check_complete(m, path, err);
    }
done:
    for (int i = 0; i < n_shards; i++) free(shards[i]);
    free(shards);
    cJSON_Delete(L.recipe);
    return rc;
}
