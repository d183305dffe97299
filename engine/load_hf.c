#define _POSIX_C_SOURCE 200809L
/* load_hf.c - reader for Hugging Face Whisper directories:
 * config.json + model.safetensors (or model.safetensors.index.json with
 * shards). Float32 tensors are used in place from the memory mapping when
 * aligned; others are converted.
 *
 * safetensors layout: u64 header_len, header_len bytes of JSON
 * {name: {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ...}
 * with offsets relative to the end of the header.
 */
#include "log.h"
#include "model.h"

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

/* ---- safetensors ------------------------------------------------------ */

typedef struct st_file {
    char path[4096];
    sotto_mapfile map;
    cJSON *header;
    const unsigned char *data; /* start of the tensor data area */
    size_t data_size;
} st_file;

static sotto_dtype st_dtype(const char *s) {
    if (strcmp(s, "F32") == 0) return SOTTO_DT_F32;
    if (strcmp(s, "F16") == 0) return SOTTO_DT_F16;
    if (strcmp(s, "BF16") == 0) return SOTTO_DT_BF16;
    if (strcmp(s, "I8") == 0) return SOTTO_DT_I8;
    if (strcmp(s, "I16") == 0) return SOTTO_DT_I16;
    if (strcmp(s, "I32") == 0) return SOTTO_DT_I32;
    if (strcmp(s, "U8") == 0) return SOTTO_DT_U8;
    return SOTTO_DT_OTHER;
}

static int st_open(st_file *f, sotto_mapfile *map, sotto_err *err) {
    int rc = sotto_mapfile_open(f->path, map, err);
    if (rc) return rc;
    if (map->size < 8)
        return sotto_err_set(err, SOTTO_E_FORMAT, "%s: truncated (%zu bytes, no header)", f->path,
                             map->size);
    uint64_t hlen;
    memcpy(&hlen, map->data, 8);
    if (hlen < 2 || hlen > map->size - 8 || hlen > (100u << 20))
        return sotto_err_set(err, SOTTO_E_FORMAT,
                             "%s: header length %llu does not fit the file of %zu bytes", f->path,
                             (unsigned long long)hlen, map->size);
    f->header = cJSON_ParseWithLength((const char *)map->data + 8, (size_t)hlen);
    if (!f->header || !cJSON_IsObject(f->header))
        return sotto_err_set(err, SOTTO_E_FORMAT, "%s: header is not valid JSON", f->path);
    f->data = map->data + 8 + hlen;
    f->data_size = map->size - 8 - (size_t)hlen;
    return SOTTO_OK;
}

/* Describes tensor `item` of file f as a 2-D source view. */
static int st_tensor(const st_file *f, const cJSON *item, sotto_src_tensor *src, sotto_err *err) {
    const char *name = item->string;
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(item, "dtype");
    const cJSON *shape = cJSON_GetObjectItemCaseSensitive(item, "shape");
    const cJSON *offs = cJSON_GetObjectItemCaseSensitive(item, "data_offsets");
    if (!cJSON_IsString(dt) || !cJSON_IsArray(shape) || !cJSON_IsArray(offs) ||
        cJSON_GetArraySize(offs) != 2)
        return sotto_err_set(err, SOTTO_E_FORMAT, "%s: bad header entry for '%s'", f->path, name);
    memset(src, 0, sizeof *src);
    src->file = f->path;
    src->name = name;
    src->dtype = st_dtype(dt->valuestring);
    int rank = cJSON_GetArraySize(shape);
    int64_t count = 1, rows = 1;
    for (int d = 0; d < rank; d++) {
        const cJSON *dim = cJSON_GetArrayItem(shape, d);
        if (!cJSON_IsNumber(dim) || dim->valuedouble < 0 || dim->valuedouble > 1e12)
            return sotto_err_set(err, SOTTO_E_FORMAT, "%s: bad shape for '%s'", f->path, name);
        int64_t v = (int64_t)dim->valuedouble;
        if (d == 0 && rank > 1) rows = v;
        if (v && count > ((int64_t)1 << 40) / v)
            return sotto_err_set(err, SOTTO_E_FORMAT, "%s: '%s' is implausibly large", f->path,
                                 name);
        count *= v;
    }
    src->rows = rows;
    src->cols = rows ? count / rows : 0;
    double b = cJSON_GetArrayItem(offs, 0)->valuedouble;
    double e = cJSON_GetArrayItem(offs, 1)->valuedouble;
    size_t es = sotto_dtype_size(src->dtype);
    if (b < 0 || e < b || e > (double)f->data_size)
        return sotto_err_set(err, SOTTO_E_FORMAT,
                             "%s: tensor '%s' lies outside the file (offsets %.0f..%.0f of %zu "
                             "data bytes; truncated?)",
                             f->path, name, b, e, f->data_size);
    if (es && (size_t)(e - b) != (size_t)count * es)
        return sotto_err_set(err, SOTTO_E_FORMAT, "%s: tensor '%s' has %.0f bytes, shape needs %zu",
                             f->path, name, e - b, (size_t)count * es);
    src->data = f->data + (size_t)b;
    return SOTTO_OK;
}

/* HF name (without the optional "model." prefix) -> canonical name. */
static int hf_canon(const char *name, char *out, size_t outsz) {
    static const struct {
        const char *hf, *canon;
    } globals[] = {
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
    } layer[] = {
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
    if (strncmp(name, "model.", 6) == 0) name += 6;
    for (size_t i = 0; i < sizeof globals / sizeof globals[0]; i++) {
        if (strcmp(name, globals[i].hf) == 0) {
            snprintf(out, outsz, "%s", globals[i].canon);
            return 1;
        }
    }
    char side[16];
    int idx, consumed = 0;
    if (sscanf(name, "%15[a-z].layers.%d.%n", side, &idx, &consumed) == 2 && consumed > 0 &&
        (strcmp(side, "encoder") == 0 || strcmp(side, "decoder") == 0)) {
        for (size_t i = 0; i < sizeof layer / sizeof layer[0]; i++) {
            if (strcmp(name + consumed, layer[i].hf) == 0) {
                snprintf(out, outsz, "%s.%d.%s", side[0] == 'e' ? "enc" : "dec", idx,
                         layer[i].canon);
                return 1;
            }
        }
    }
    return 0;
}

static int put_file(sotto_model *m, st_file *f, sotto_err *err) {
    const cJSON *item;
    cJSON_ArrayForEach(item, f->header) {
        if (strcmp(item->string, "__metadata__") == 0) continue;
        char canon[48];
        if (!hf_canon(item->string, canon, sizeof canon)) {
            if (strcmp(item->string, "proj_out.weight") != 0) /* tied to the embedding */
                SOTTO_DEBUG("%s: ignoring tensor '%s'", f->path, item->string);
            continue;
        }
        sotto_src_tensor src;
        int rc = st_tensor(f, item, &src, err);
        if (rc) return rc;
        if (src.dtype == SOTTO_DT_OTHER || src.dtype == SOTTO_DT_I32 || src.dtype == SOTTO_DT_U8)
            return sotto_err_set(err, SOTTO_E_UNSUPPORTED, "%s: tensor '%s' has an unsupported type",
                                 f->path, item->string);
        /* vectors are [1 x n]; conv weights [out][in][k] flatten to [out][in*k] */
        if ((rc = sotto_model_put(m, canon, &src, 0, 0, err))) return rc;
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
    int rc = read_config(m, dir, err);
    if (rc) return rc;
    if ((rc = sotto_model_alloc_slots(m, err))) return rc;
    if ((rc = list_shards(dir, &shards, &n_shards, err))) goto done;
    for (int i = 0; i < n_shards && rc == 0; i++) {
        st_file f;
        memset(&f, 0, sizeof f);
        if (sotto_path_join(f.path, sizeof f.path, dir, shards[i])) {
            rc = sotto_err_set(err, SOTTO_E_RANGE, "path too long");
            break;
        }
        /* The single-file case keeps its mapping in the model so that f32
         * tensors can be borrowed; shards are converted and unmapped. */
        sotto_mapfile tmp = {0};
        sotto_mapfile *map = n_shards == 1 ? &m->map : &tmp;
        rc = st_open(&f, map, err);
        if (rc == 0) rc = put_file(m, &f, err);
        cJSON_Delete(f.header);
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
    return rc;
}
