/* load_ct2.c - reader for CTranslate2 / faster-whisper model directories.
 *
 * model.bin layout (little endian; binary versions 4..6):
 *   u32 version, string spec_name, u32 spec_revision, u32 n_variables,
 *   n x { string name, u8 rank, u32 dims[rank], u8 dtype, u32 n_bytes,
 *         n_bytes of data },
 *   u32 n_aliases, n x { string alias, string target }
 * where a string is u16 length (including the trailing NUL) + bytes.
 * dtype: 0 float32, 1 int8, 2 int16, 3 int32, 4 float16, 5 bfloat16.
 * Quantized weights ("X/weight" int8/int16) come with "X/weight_scale"
 * (one float per row; value = q / scale).
 */
#include "log.h"
#include "model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct ct2_var {
    const char *name; /* points into the mapping (NUL-terminated there) */
    sotto_dtype dtype;
    int rank;
    int64_t dims[8];
    const void *data;
    uint32_t n_bytes;
} ct2_var;

typedef struct ct2_file {
    const char *path;
    const unsigned char *p, *end, *begin;
    ct2_var *vars;
    int n_vars;
} ct2_file;

static int truncated(const ct2_file *f, const char *what, sotto_err *err) {
    return sotto_err_set(err, SOTTO_E_FORMAT,
                         "%s: truncated or corrupt (at byte %zu of %zu, reading %s)", f->path,
                         (size_t)(f->p - f->begin), (size_t)(f->end - f->begin), what);
}

static int rd_u32(ct2_file *f, uint32_t *v, const char *what, sotto_err *err) {
    if (f->end - f->p < 4) return truncated(f, what, err);
    memcpy(v, f->p, 4);
    f->p += 4;
    return SOTTO_OK;
}

static int rd_u8(ct2_file *f, uint8_t *v, const char *what, sotto_err *err) {
    if (f->end - f->p < 1) return truncated(f, what, err);
    *v = *f->p++;
    return SOTTO_OK;
}

static int rd_str(ct2_file *f, const char **s, const char *what, sotto_err *err) {
    uint16_t len;
    if (f->end - f->p < 2) return truncated(f, what, err);
    memcpy(&len, f->p, 2);
    f->p += 2;
    if (len == 0 || f->end - f->p < len) return truncated(f, what, err);
    if (f->p[len - 1] != '\0' || memchr(f->p, '\0', len - 1))
        return sotto_err_set(err, SOTTO_E_FORMAT, "%s: corrupt string at byte %zu (%s)", f->path,
                             (size_t)(f->p - f->begin), what);
    *s = (const char *)f->p;
    f->p += len;
    return SOTTO_OK;
}

static sotto_dtype ct2_dtype(uint8_t id) {
    static const sotto_dtype map[] = {SOTTO_DT_F32, SOTTO_DT_I8,  SOTTO_DT_I16,
                                      SOTTO_DT_I32, SOTTO_DT_F16, SOTTO_DT_BF16};
    return id < 6 ? map[id] : SOTTO_DT_OTHER;
}

static int parse(ct2_file *f, sotto_err *err) {
    uint32_t version = 0, revision = 0, n = 0;
    const char *spec = NULL;
    int rc;
    if ((rc = rd_u32(f, &version, "the format version", err))) return rc;
    if (version < 4 || version > 6)
        return sotto_err_set(err, SOTTO_E_UNSUPPORTED,
                             "%s: CTranslate2 binary version %u is not supported (4 to 6 are)",
                             f->path, version);
    if ((rc = rd_str(f, &spec, "the model spec name", err))) return rc;
    if ((rc = rd_u32(f, &revision, "the spec revision", err))) return rc;
    if (strcmp(spec, "WhisperSpec") != 0)
        return sotto_err_set(err, SOTTO_E_UNSUPPORTED, "%s: a %s model, not a Whisper model",
                             f->path, spec);
    if ((rc = rd_u32(f, &n, "the variable count", err))) return rc;
    if (n > 100000)
        return sotto_err_set(err, SOTTO_E_FORMAT, "%s: implausible variable count %u", f->path, n);
    f->vars = calloc(n ? n : 1, sizeof *f->vars);
    if (!f->vars) return sotto_err_set(err, SOTTO_E_NOMEM, "out of memory");
    for (uint32_t i = 0; i < n; i++) {
        ct2_var *v = &f->vars[i];
        uint8_t rank = 0, dt = 0;
        if ((rc = rd_str(f, &v->name, "a variable name", err))) return rc;
        if ((rc = rd_u8(f, &rank, v->name, err))) return rc;
        if (rank > 8)
            return sotto_err_set(err, SOTTO_E_FORMAT, "%s: variable '%s' has rank %u", f->path,
                                 v->name, rank);
        v->rank = rank;
        uint64_t count = 1;
        for (int d = 0; d < rank; d++) {
            uint32_t dim = 0;
            if ((rc = rd_u32(f, &dim, v->name, err))) return rc;
            v->dims[d] = dim;
            if (dim && count > (1ull << 40) / dim)
                return sotto_err_set(err, SOTTO_E_FORMAT, "%s: variable '%s' is implausibly large",
                                     f->path, v->name);
            count *= dim;
        }
        if ((rc = rd_u8(f, &dt, v->name, err))) return rc;
        v->dtype = ct2_dtype(dt);
        if (v->dtype == SOTTO_DT_OTHER)
            return sotto_err_set(err, SOTTO_E_FORMAT, "%s: variable '%s' has unknown type id %u",
                                 f->path, v->name, dt);
        if ((rc = rd_u32(f, &v->n_bytes, v->name, err))) return rc;
        if ((uint64_t)v->n_bytes != count * sotto_dtype_size(v->dtype))
            return sotto_err_set(err, SOTTO_E_FORMAT,
                                 "%s: variable '%s' has %u bytes, its shape needs %llu", f->path,
                                 v->name, v->n_bytes,
                                 (unsigned long long)(count * sotto_dtype_size(v->dtype)));
        if ((size_t)(f->end - f->p) < v->n_bytes) return truncated(f, v->name, err);
        v->data = f->p;
        f->p += v->n_bytes;
        f->n_vars++;
    }
    /* Aliases: Whisper's only one ties the output projection to the
     * embedding, which is how sotto treats it anyway. */
    uint32_t n_alias = 0;
    if ((rc = rd_u32(f, &n_alias, "the alias count", err))) return rc;
    for (uint32_t i = 0; i < n_alias; i++) {
        const char *a = NULL, *t = NULL;
        if ((rc = rd_str(f, &a, "an alias", err))) return rc;
        if ((rc = rd_str(f, &t, "an alias target", err))) return rc;
    }
    (void)revision;
    return SOTTO_OK;
}

static const ct2_var *find(const ct2_file *f, const char *name) {
    for (int i = 0; i < f->n_vars; i++)
        if (strcmp(f->vars[i].name, name) == 0) return &f->vars[i];
    return NULL;
}

static int need(const ct2_file *f, const char *name, int rank, const ct2_var **out,
                sotto_err *err) {
    const ct2_var *v = find(f, name);
    if (!v) return sotto_err_set(err, SOTTO_E_NOTFOUND, "%s: missing variable '%s'", f->path, name);
    if (rank >= 0 && v->rank != rank)
        return sotto_err_set(err, SOTTO_E_FORMAT, "%s: variable '%s' has rank %d, expected %d",
                             f->path, name, v->rank, rank);
    *out = v;
    return SOTTO_OK;
}

static int count_layers(const ct2_file *f, const char *prefix) {
    int n = 0;
    char name[128];
    for (;;) {
        snprintf(name, sizeof name, "%s/layer_%d/ffn/linear_0/weight", prefix, n);
        if (!find(f, name)) return n;
        n++;
    }
}

static int read_heads(const ct2_file *f, const char *name, int width) {
    const ct2_var *v = find(f, name);
    if (v && v->rank == 0) {
        if (v->dtype == SOTTO_DT_I16) {
            int16_t h;
            memcpy(&h, v->data, 2);
            return h;
        }
        if (v->dtype == SOTTO_DT_I32) {
            int32_t h;
            memcpy(&h, v->data, 4);
            return h;
        }
    }
    return width / 64; /* every Whisper size uses 64-wide heads */
}

static int fill_hparams(sotto_model *m, const ct2_file *f, sotto_err *err) {
    const ct2_var *conv1 = NULL, *epos = NULL, *dpos = NULL, *emb = NULL, *efc = NULL,
                  *dfc = NULL;
    int rc;
    if ((rc = need(f, "encoder/conv1/weight", 3, &conv1, err)) ||
        (rc = need(f, "encoder/position_encodings/encodings", 2, &epos, err)) ||
        (rc = need(f, "decoder/position_encodings/encodings", 2, &dpos, err)) ||
        (rc = need(f, "decoder/embeddings/weight", 2, &emb, err)) ||
        (rc = need(f, "encoder/layer_0/ffn/linear_0/weight", 2, &efc, err)) ||
        (rc = need(f, "decoder/layer_0/ffn/linear_0/weight", 2, &dfc, err)))
        return rc;
    if (conv1->dims[2] != 3)
        return sotto_err_set(err, SOTTO_E_FORMAT, "%s: conv1 kernel width %lld, expected 3",
                             f->path, (long long)conv1->dims[2]);
    sotto_hparams *hp = &m->hp;
    hp->n_audio_state = (int32_t)conv1->dims[0];
    hp->n_mels = (int32_t)conv1->dims[1];
    hp->n_audio_ctx = (int32_t)epos->dims[0];
    hp->n_audio_layer = count_layers(f, "encoder");
    hp->n_audio_head = read_heads(f, "encoder/num_heads", hp->n_audio_state);
    hp->n_audio_ff = (int32_t)efc->dims[0];
    hp->n_text_ctx = (int32_t)dpos->dims[0];
    hp->n_text_state = (int32_t)emb->dims[1];
    hp->n_text_layer = count_layers(f, "decoder");
    hp->n_text_head = read_heads(f, "decoder/num_heads", hp->n_text_state);
    hp->n_text_ff = (int32_t)dfc->dims[0];
    hp->n_vocab = (int32_t)emb->dims[0];
    return SOTTO_OK;
}

/* Canonical name (and, for fused tensors, the row block) of a CT2 name. */
typedef struct name_map {
    const char *suffix; /* after "<side>/layer_N/" */
    const char *canon[3];
} name_map;

static const name_map k_layer_map[] = {
    {"self_attention/layer_norm/gamma", {"attn_ln.g"}},
    {"self_attention/layer_norm/beta", {"attn_ln.b"}},
    {"self_attention/linear_0/weight", {"q.w", "k.w", "v.w"}},
    {"self_attention/linear_0/bias", {"q.b", "k.b", "v.b"}},
    {"self_attention/linear_1/weight", {"o.w"}},
    {"self_attention/linear_1/bias", {"o.b"}},
    {"attention/layer_norm/gamma", {"cross_ln.g"}},
    {"attention/layer_norm/beta", {"cross_ln.b"}},
    {"attention/linear_0/weight", {"cq.w"}},
    {"attention/linear_0/bias", {"cq.b"}},
    {"attention/linear_1/weight", {"ck.w", "cv.w"}},
    {"attention/linear_1/bias", {"ck.b", "cv.b"}},
    {"attention/linear_2/weight", {"co.w"}},
    {"attention/linear_2/bias", {"co.b"}},
    {"ffn/layer_norm/gamma", {"mlp_ln.g"}},
    {"ffn/layer_norm/beta", {"mlp_ln.b"}},
    {"ffn/linear_0/weight", {"fc1.w"}},
    {"ffn/linear_0/bias", {"fc1.b"}},
    {"ffn/linear_1/weight", {"fc2.w"}},
    {"ffn/linear_1/bias", {"fc2.b"}},
};

static const struct {
    const char *ct2, *canon;
} k_global_map[] = {
    {"encoder/conv1/weight", "enc.conv1.w"},
    {"encoder/conv1/bias", "enc.conv1.b"},
    {"encoder/conv2/weight", "enc.conv2.w"},
    {"encoder/conv2/bias", "enc.conv2.b"},
    {"encoder/position_encodings/encodings", "enc.pos"},
    {"encoder/layer_norm/gamma", "enc.ln.g"},
    {"encoder/layer_norm/beta", "enc.ln.b"},
    {"decoder/embeddings/weight", "dec.emb"},
    {"decoder/position_encodings/encodings", "dec.pos"},
    {"decoder/layer_norm/gamma", "dec.ln.g"},
    {"decoder/layer_norm/beta", "dec.ln.b"},
};

static int ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

static int put_var(sotto_model *m, const ct2_file *f, const ct2_var *v, sotto_err *err) {
    if (v->rank == 0) return SOTTO_OK; /* scalars: num_heads, flags */
    if (ends_with(v->name, "_scale")) return SOTTO_OK; /* consumed with their weight */
    sotto_src_tensor src = {f->path, v->name, v->dtype, 1, 1, v->data, NULL};
    src.rows = v->rank == 1 ? 1 : v->dims[0];
    for (int d = v->rank == 1 ? 0 : 1; d < v->rank; d++) src.cols *= v->dims[d];
    if (v->dtype == SOTTO_DT_I8 || v->dtype == SOTTO_DT_I16) {
        char sname[256];
        snprintf(sname, sizeof sname, "%s_scale", v->name);
        const ct2_var *sv = find(f, sname);
        if (!sv || sv->dtype != SOTTO_DT_F32 || sv->rank != 1 || sv->dims[0] != src.rows)
            return sotto_err_set(err, SOTTO_E_FORMAT,
                                 "%s: quantized '%s' has no matching float32 '%s'", f->path,
                                 v->name, sname);
        src.row_scale = (const float *)sv->data; /* may be unaligned: copied below */
    }
    float *scale_copy = NULL;
    if (src.row_scale) {
        scale_copy = malloc(sizeof(float) * (size_t)src.rows);
        if (!scale_copy) return sotto_err_set(err, SOTTO_E_NOMEM, "out of memory");
        memcpy(scale_copy, src.row_scale, sizeof(float) * (size_t)src.rows);
        src.row_scale = scale_copy;
    }
    int rc = SOTTO_OK;
    for (size_t i = 0; i < sizeof k_global_map / sizeof k_global_map[0]; i++) {
        if (strcmp(v->name, k_global_map[i].ct2) == 0) {
            rc = sotto_model_put(m, k_global_map[i].canon, &src, 0, 0, err);
            goto done;
        }
    }
    int layer;
    char side[16];
    int consumed = 0;
    if (sscanf(v->name, "%15[a-z]/layer_%d/%n", side, &layer, &consumed) == 2 && consumed > 0 &&
        (strcmp(side, "encoder") == 0 || strcmp(side, "decoder") == 0)) {
        const char *suffix = v->name + consumed;
        for (size_t i = 0; i < sizeof k_layer_map / sizeof k_layer_map[0]; i++) {
            const name_map *nm = &k_layer_map[i];
            if (strcmp(suffix, nm->suffix) != 0) continue;
            int parts = nm->canon[2] ? 3 : nm->canon[1] ? 2 : 1;
            /* vectors (biases) split along their single row of columns */
            sotto_src_tensor s2 = src;
            if (v->rank == 1 && parts > 1) {
                s2.rows = parts;
                s2.cols = src.cols / parts;
            }
            if (s2.rows % parts || s2.rows * s2.cols != src.rows * src.cols) {
                rc = sotto_err_set(err, SOTTO_E_FORMAT, "%s: '%s' does not split into %d equal parts",
                                   f->path, v->name, parts);
                goto done;
            }
            int64_t block = s2.rows / parts;
            for (int k = 0; k < parts; k++) {
                char canon[48];
                snprintf(canon, sizeof canon, "%s.%d.%s", side[0] == 'e' ? "enc" : "dec", layer,
                         nm->canon[k]);
                rc = sotto_model_put(m, canon, &s2, k * block, block, err);
                if (rc) goto done;
            }
            goto done;
        }
    }
    if (strcmp(v->name, "decoder/projection/weight") == 0) {
        rc = sotto_err_set(err, SOTTO_E_UNSUPPORTED,
                           "%s: an output projection separate from the embedding is not "
                           "supported",
                           f->path);
        goto done;
    }
    SOTTO_DEBUG("%s: ignoring variable '%s'", f->path, v->name);
done:
    free(scale_copy);
    return rc;
}

/* The default weights for this file: f16 when every matrix (rank 2: the
 * linear layers and the embedding) is float16, as CTranslate2 writes a
 * "float16" conversion; they are then used in place, exactly, at half the
 * bytes of f32. Anything else (float32, int8 conversions): f32. */
static sotto_wfmt ckpt_weights(const ct2_file *f) {
    int n = 0;
    for (int i = 0; i < f->n_vars; i++) {
        if (f->vars[i].rank != 2) continue;
        if (f->vars[i].dtype != SOTTO_DT_F16) return SOTTO_WFMT_F32;
        n++;
    }
    return n ? SOTTO_WFMT_F16 : SOTTO_WFMT_F32;
}

/* Maps dir/model.bin into *map (path: its name, kept by the caller for f's
 * messages) and parses its variable table into *f. The caller frees f->vars
 * (also on failure) and closes the map. */
static int open_parse(const char *dir, char path[4096], sotto_mapfile *map, ct2_file *f, sotto_err *err) {
    *f = (ct2_file){path, NULL, NULL, NULL, NULL, 0};
    if (sotto_path_join(path, 4096, dir, "model.bin"))
        return sotto_err_set(err, SOTTO_E_RANGE, "model path too long");
    int rc = sotto_mapfile_open(path, map, err);
    if (rc) return rc;
    if (map->size == 0) return sotto_err_set(err, SOTTO_E_FORMAT, "%s: empty file", path);
    *f = (ct2_file){path, map->data, map->data + map->size, map->data, NULL, 0};
    return parse(f, err);
}

int sotto_ct2_ckpt_weights(const char *dir, sotto_wfmt *out, sotto_err *err) {
    char path[4096];
    sotto_mapfile map = {0};
    ct2_file f;
    int rc = open_parse(dir, path, &map, &f, err);
    if (rc == SOTTO_OK) *out = ckpt_weights(&f);
    free(f.vars);
    sotto_mapfile_close(&map);
    return rc;
}

int sotto_load_ct2(sotto_model *m, const char *dir, sotto_err *err) {
    char path[4096];
    ct2_file f;
    int rc = open_parse(dir, path, &m->map, &f, err);
    if (rc) goto done;
    if ((rc = fill_hparams(m, &f, err))) goto done;
    m->ckpt_weights = ckpt_weights(&f);
    if ((rc = sotto_model_choose_policy(m, err))) goto done;
    if ((rc = sotto_model_alloc_slots(m, err))) goto done;
    for (int i = 0; i < f.n_vars; i++)
        if ((rc = put_var(m, &f, &f.vars[i], err))) goto done;
    rc = sotto_model_check_complete(m, path, err);
done:
    free(f.vars);
    return rc;
}
