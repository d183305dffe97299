/* snapshot.c - writing and checking pre-quantized snapshots (snapshot.h). */
#define _POSIX_C_SOURCE 200809L
#include "snapshot.h"

#include "log.h"
#include "quant.h"
#include "safetensors.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

#define RECIPE_FORMAT "sotto-quantized-whisper"
#define RECIPE_VERSION 1

/* ---- reading -------------------------------------------------------------- */

int sotto_snapshot_read_recipe(sotto_model *m, const char *dir, cJSON **recipe, sotto_err *err) {
    char path[4096], *text = NULL;
    *recipe = NULL;
    if (sotto_path_join(path, sizeof path, dir, SOTTO_SNAPSHOT_RECIPE))
        return sotto_err_set(err, SOTTO_E_RANGE, "path too long");
    if (!sotto_file_exists(path)) return SOTTO_OK;
    int rc = sotto_read_file(path, 1 << 26, &text, NULL, err);
    if (rc) return rc;
    cJSON *r = cJSON_Parse(text);
    free(text);
    const cJSON *fmt = r ? cJSON_GetObjectItemCaseSensitive(r, "format") : NULL;
    const cJSON *ver = r ? cJSON_GetObjectItemCaseSensitive(r, "version") : NULL;
    const cJSON *pol = r ? cJSON_GetObjectItemCaseSensitive(r, "policy") : NULL;
    const cJSON *ts = r ? cJSON_GetObjectItemCaseSensitive(r, "tensors") : NULL;
    if (!cJSON_IsString(fmt) || strcmp(fmt->valuestring, RECIPE_FORMAT) != 0 ||
        !cJSON_IsNumber(ver) || !cJSON_IsString(pol) || !cJSON_IsObject(ts)) {
        cJSON_Delete(r);
        return sotto_err_set(err, SOTTO_E_FORMAT, "%s: not a sotto snapshot recipe", path);
    }
    if (ver->valueint != RECIPE_VERSION) {
        int version = ver->valueint; /* ver is freed with r */
        cJSON_Delete(r);
        return sotto_err_set(err, SOTTO_E_UNSUPPORTED, "%s: recipe version %d (this sotto reads %d)",
                             path, version, RECIPE_VERSION);
    }
    sotto_policy p = sotto_policy_uniform(SOTTO_WFMT_F32);
    sotto_err perr;
    sotto_err_clear(&perr);
    if ((rc = sotto_policy_apply(&p, pol->valuestring, &perr))) {
        cJSON_Delete(r); /* (the message is formatted from a copy: never err->msg into itself) */
        return sotto_err_set(err, rc, "%s: %s", path, perr.msg[0] ? perr.msg : "bad policy");
    }
    /* the caller's request, if any, must be what the snapshot holds */
    int asked = sotto_model_formats_asked(m);
    if (asked && !sotto_policy_equal(&p, &m->policy)) {
        char have[512], want[512];
        sotto_policy_format(&p, have, sizeof have);
        sotto_policy_format(&m->policy, want, sizeof want);
        cJSON_Delete(r);
        return sotto_err_set(err, SOTTO_E_INVALID,
                             "%s: the snapshot holds %s, but %s was asked for; quantize the "
                             "original checkpoint instead",
                             dir, have, want);
    }
    m->policy = p;
    m->from_snapshot = 1;
    *recipe = r;
    return SOTTO_OK;
}

int sotto_snapshot_check_tensor(const cJSON *recipe, const char *file, const char *name,
                                const void *data, size_t nbytes, sotto_err *err) {
    const cJSON *ts = cJSON_GetObjectItemCaseSensitive(recipe, "tensors");
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(ts, name);
    const cJSON *crc = t ? cJSON_GetObjectItemCaseSensitive(t, "crc32") : NULL;
    if (!cJSON_IsNumber(crc))
        return sotto_err_set(err, SOTTO_E_FORMAT, "%s: tensor '%s' is not listed in %s", file, name,
                             SOTTO_SNAPSHOT_RECIPE);
    double want = crc->valuedouble;
    if (!(want >= 0 && want <= 4294967295.0) || want != (double)(unsigned long)want)
        return sotto_err_set(err, SOTTO_E_FORMAT,
                             "%s: the CRC-32 listed for tensor '%s' in %s is not a 32-bit "
                             "unsigned integer",
                             file, name, SOTTO_SNAPSHOT_RECIPE);
    uLong c = crc32(0L, Z_NULL, 0);
    const unsigned char *p = data;
    size_t left = nbytes;
    while (left) { /* zlib takes uInt lengths */
        uInt chunk = left > (1u << 30) ? (1u << 30) : (uInt)left;
        c = crc32(c, p, chunk);
        p += chunk;
        left -= chunk;
    }
    if ((double)c != want)
        return sotto_err_set(err, SOTTO_E_FORMAT,
                             "%s: tensor '%s' is corrupted (CRC-32 %08lx, the recipe says %08lx)",
                             file, name, (unsigned long)c, (unsigned long)want);
    return SOTTO_OK;
}

/* ---- writing --------------------------------------------------------------- */

typedef struct writer {
    sotto_st_writer *st;
    cJSON *tensors; /* recipe entries */
    char **owned;   /* strings/buffers to free after writing */
    int n_owned, cap_owned;
} writer;

static void *keep(writer *w, void *p) {
    if (!p) return NULL;
    if (w->n_owned == w->cap_owned) {
        int cap = w->cap_owned ? 2 * w->cap_owned : 64;
        char **no = realloc(w->owned, sizeof *no * (size_t)cap);
        if (!no) {
            free(p);
            return NULL;
        }
        w->owned = no;
        w->cap_owned = cap;
    }
    w->owned[w->n_owned++] = p;
    return p;
}

static int add(writer *w, const char *name, sotto_dtype dt, int rank, const int64_t *dims,
               const void *data, size_t nbytes, const char *fmt, sotto_err *err) {
    int rc = sotto_st_writer_add(w->st, name, dt, rank, dims, data, nbytes, err);
    if (rc) return rc;
    uLong c = crc32(0L, Z_NULL, 0);
    const unsigned char *p = data;
    size_t left = nbytes;
    while (left) {
        uInt chunk = left > (1u << 30) ? (1u << 30) : (uInt)left;
        c = crc32(c, p, chunk);
        p += chunk;
        left -= chunk;
    }
    cJSON *e = cJSON_AddObjectToObject(w->tensors, name);
    if (!e || !cJSON_AddNumberToObject(e, "crc32", (double)c) ||
        !cJSON_AddStringToObject(e, "format", fmt))
        return sotto_err_set(err, SOTTO_E_NOMEM, "out of memory");
    return SOTTO_OK;
}

static int add_matrix(writer *w, const char *hf, const sotto_wmat *m, sotto_err *err) {
    char base[512], name[560];
    size_t len = strlen(hf);
    if (len < 7 || strcmp(hf + len - 7, ".weight") != 0)
        return sotto_err_set(err, SOTTO_E_INTERNAL, "%s is not a weight", hf);
    snprintf(base, sizeof base, "%.*s", (int)(len - 7), hf);
    const int64_t r = m->rows, c = m->cols, n = r * c;
    const char *fn = sotto_wfmt_name(m->fmt);
    int rc;
    switch (m->fmt) {
    case SOTTO_WFMT_F32: {
        int64_t d[2] = {r, c};
        return add(w, hf, SOTTO_DT_F32, 2, d, m->data, (size_t)n * 4, fn, err);
    }
    case SOTTO_WFMT_BF16: {
        int64_t d[2] = {r, c};
        return add(w, hf, SOTTO_DT_BF16, 2, d, m->data, (size_t)n * 2, fn, err);
    }
    case SOTTO_WFMT_F16: {
        int64_t d[2] = {r, c};
        return add(w, hf, SOTTO_DT_F16, 2, d, m->data, (size_t)n * 2, fn, err);
    }
    case SOTTO_WFMT_Q8: {
        int64_t d[2] = {r, c}, ds[2] = {r, c / 32};
        if ((rc = add(w, hf, SOTTO_DT_I8, 2, d, m->data, (size_t)n, fn, err))) return rc;
        snprintf(name, sizeof name, "%s.weight_scale", base);
        return add(w, name, SOTTO_DT_F32, 2, ds, m->scales, (size_t)(n / 32) * 4, fn, err);
    }
    case SOTTO_WFMT_NF4: {
        /* bitsandbytes' serialization of a Linear4bit weight */
        const sotto_nf4_dq *dq = m->nf4_dq;
        int64_t dq2[2] = {n / 2, 1}, da = n / 64, dm = 16, dn = (da + 255) / 256, d256 = 256;
        if ((rc = add(w, hf, SOTTO_DT_U8, 2, dq2, m->data, (size_t)(n / 2), fn, err))) return rc;
        snprintf(name, sizeof name, "%s.weight.absmax", base);
        if (dq)
            rc = add(w, name, SOTTO_DT_U8, 1, &da, dq->codes, (size_t)da, fn, err);
        else
            rc = add(w, name, SOTTO_DT_F32, 1, &da, m->scales, (size_t)da * 4, fn, err);
        if (rc) return rc;
        snprintf(name, sizeof name, "%s.weight.quant_map", base);
        if ((rc = add(w, name, SOTTO_DT_F32, 1, &dm, sotto_nf4_code, 64, fn, err))) return rc;
        if (dq) {
            snprintf(name, sizeof name, "%s.weight.nested_absmax", base);
            if ((rc = add(w, name, SOTTO_DT_F32, 1, &dn, dq->nested_absmax, (size_t)dn * 4, fn, err)))
                return rc;
            snprintf(name, sizeof name, "%s.weight.nested_quant_map", base);
            if ((rc = add(w, name, SOTTO_DT_F32, 1, &d256, sotto_dyn8_code, 1024, fn, err)))
                return rc;
        }
        char *state = keep(w, malloc(320));
        if (!state) return sotto_err_set(err, SOTTO_E_NOMEM, "out of memory");
        int sl;
        if (dq)
            sl = snprintf(state, 320,
                          "{\"quant_type\": \"nf4\", \"blocksize\": 64, \"dtype\": \"float32\", "
                          "\"shape\": [%lld, %lld], \"nested_blocksize\": 256, "
                          "\"nested_dtype\": \"float32\", \"nested_offset\": %.9g}",
                          (long long)r, (long long)c, (double)dq->offset);
        else
            sl = snprintf(state, 320,
                          "{\"quant_type\": \"nf4\", \"blocksize\": 64, \"dtype\": \"float32\", "
                          "\"shape\": [%lld, %lld]}",
                          (long long)r, (long long)c);
        int64_t ds = sl;
        snprintf(name, sizeof name, "%s.weight.quant_state.bitsandbytes__nf4", base);
        return add(w, name, SOTTO_DT_U8, 1, &ds, state, (size_t)sl, fn, err);
    }
    case SOTTO_WFMT_NVFP4: {
        /* compressed-tensors' nvfp4-pack-quantized layout */
        int64_t dp[2] = {r, c / 2}, ds[2] = {r, c / 16}, dg = 1;
        snprintf(name, sizeof name, "%s.weight_packed", base);
        if ((rc = add(w, name, SOTTO_DT_U8, 2, dp, m->data, (size_t)(n / 2), fn, err))) return rc;
        snprintf(name, sizeof name, "%s.weight_scale", base);
        if ((rc = add(w, name, SOTTO_DT_F8E4M3, 2, ds, m->scales, (size_t)(n / 16), fn, err)))
            return rc;
        float *g = keep(w, malloc(sizeof(float)));
        if (!g) return sotto_err_set(err, SOTTO_E_NOMEM, "out of memory");
        *g = 1.0f / m->global_scale;
        snprintf(name, sizeof name, "%s.weight_global_scale", base);
        return add(w, name, SOTTO_DT_F32, 1, &dg, g, 4, fn, err);
    }
    default:
        return sotto_err_set(err, SOTTO_E_INTERNAL, "%s: unknown format", hf);
    }
}

static int write_config(const sotto_model *m, const char *dir, sotto_err *err) {
    const sotto_hparams *hp = &m->hp;
    cJSON *c = cJSON_CreateObject();
    if (!c) return sotto_err_set(err, SOTTO_E_NOMEM, "out of memory");
    cJSON_AddStringToObject(c, "model_type", "whisper");
    cJSON *arch = cJSON_AddArrayToObject(c, "architectures");
    cJSON_AddItemToArray(arch, cJSON_CreateString("WhisperForConditionalGeneration"));
    const struct {
        const char *k;
        int v;
    } kv[] = {{"d_model", hp->n_audio_state},         {"encoder_layers", hp->n_audio_layer},
              {"encoder_attention_heads", hp->n_audio_head}, {"encoder_ffn_dim", hp->n_audio_ff},
              {"decoder_layers", hp->n_text_layer},   {"decoder_attention_heads", hp->n_text_head},
              {"decoder_ffn_dim", hp->n_text_ff},     {"num_mel_bins", hp->n_mels},
              {"vocab_size", hp->n_vocab},            {"max_source_positions", hp->n_audio_ctx},
              {"max_target_positions", hp->n_text_ctx}};
    for (size_t i = 0; i < sizeof kv / sizeof kv[0]; i++) cJSON_AddNumberToObject(c, kv[i].k, kv[i].v);
    cJSON_AddBoolToObject(c, "tie_word_embeddings", 1);
    char *s = cJSON_Print(c);
    cJSON_Delete(c);
    if (!s) return sotto_err_set(err, SOTTO_E_NOMEM, "out of memory");
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "w");
    int ok = f && fputs(s, f) >= 0 && fputc('\n', f) != EOF;
    if (f && fclose(f) != 0) ok = 0;
    free(s);
    return ok ? SOTTO_OK : sotto_err_set(err, SOTTO_E_IO, "%s: cannot write", path);
}

static int copy_file(const char *src, const char *dst, sotto_err *err) {
    char *data = NULL;
    size_t len = 0;
    int rc = sotto_read_file(src, (size_t)1 << 30, &data, &len, err);
    if (rc) return rc;
    FILE *f = fopen(dst, "wb");
    int ok = f && fwrite(data, 1, len, f) == len;
    if (f && fclose(f) != 0) ok = 0;
    free(data);
    return ok ? SOTTO_OK : sotto_err_set(err, SOTTO_E_IO, "%s: cannot write", dst);
}

int sotto_snapshot_save(const sotto_model *m, const char *out_dir, sotto_err *err) {
    if (mkdir(out_dir, 0755) != 0 && errno != EEXIST)
        return sotto_err_set(err, SOTTO_E_IO, "%s: cannot create: %s", out_dir, strerror(errno));
    writer w = {sotto_st_writer_create(), cJSON_CreateObject(), NULL, 0, 0};
    cJSON *recipe = cJSON_CreateObject();
    int rc = SOTTO_OK;
    if (!w.st || !w.tensors || !recipe) {
        rc = sotto_err_set(err, SOTTO_E_NOMEM, "out of memory");
        goto done;
    }
    for (int i = 0; i < m->n_slots && rc == 0; i++) {
        const sotto_slot *s = &m->slots[i];
        if (!s->filled) continue;
        char hf[512];
        if (sotto_hf_name(s->name, hf, sizeof hf)) {
            rc = sotto_err_set(err, SOTTO_E_INTERNAL, "no Hugging Face name for %s", s->name);
            break;
        }
        if (s->is_matrix) {
            rc = add_matrix(&w, hf, s->mat, err);
        } else if (!strcmp(s->name, "enc.conv1.w") || !strcmp(s->name, "enc.conv2.w")) {
            int64_t d[3] = {s->rows, s->cols / 3, 3};
            rc = add(&w, hf, SOTTO_DT_F32, 3, d, *s->vec, (size_t)(s->rows * s->cols) * 4, "f32", err);
        } else if (s->rows > 1) {
            int64_t d[2] = {s->rows, s->cols};
            rc = add(&w, hf, SOTTO_DT_F32, 2, d, *s->vec, (size_t)(s->rows * s->cols) * 4, "f32", err);
        } else {
            int64_t d = s->cols;
            rc = add(&w, hf, SOTTO_DT_F32, 1, &d, *s->vec, (size_t)d * 4, "f32", err);
        }
    }
    char policy[512], path[4096];
    sotto_policy_format(&m->policy, policy, sizeof policy);
    if (rc == 0) rc = sotto_st_writer_meta(w.st, "format", "pt", err);
    if (rc == 0) rc = sotto_st_writer_meta(w.st, "sotto_policy", policy, err);
    snprintf(path, sizeof path, "%s/model.safetensors", out_dir);
    if (rc == 0) rc = sotto_st_writer_write(w.st, path, err);
    if (rc == 0) rc = write_config(m, out_dir, err);
    /* tokenizer and preprocessing files, whichever the source has */
    static const char *const files[] = {"tokenizer.json",      "vocabulary.txt",
                                        "vocabulary.json",     "vocab.json",
                                        "merges.txt",          "added_tokens.json",
                                        "tokenizer_config.json", "special_tokens_map.json",
                                        "preprocessor_config.json", "generation_config.json"};
    for (size_t i = 0; i < sizeof files / sizeof files[0] && rc == 0; i++) {
        char src[4096], dst[4096];
        snprintf(src, sizeof src, "%s/%s", m->dir, files[i]);
        snprintf(dst, sizeof dst, "%s/%s", out_dir, files[i]);
        if (sotto_file_exists(src)) rc = copy_file(src, dst, err);
    }
    if (rc == 0) {
        cJSON_AddStringToObject(recipe, "format", RECIPE_FORMAT);
        cJSON_AddNumberToObject(recipe, "version", RECIPE_VERSION);
        cJSON_AddStringToObject(recipe, "policy", policy);
        cJSON *src = cJSON_AddObjectToObject(recipe, "source");
        cJSON_AddStringToObject(src, "dir", m->dir);
        cJSON_AddStringToObject(src, "format", m->format_name);
        cJSON *bytes = cJSON_AddObjectToObject(recipe, "bytes");
        cJSON_AddNumberToObject(bytes, "encoder", (double)m->part_bytes[SOTTO_PART_ENCODER]);
        cJSON_AddNumberToObject(bytes, "decoder", (double)m->part_bytes[SOTTO_PART_DECODER]);
        cJSON_AddNumberToObject(bytes, "embed", (double)m->part_bytes[SOTTO_PART_EMBED]);
        cJSON_AddItemToObject(recipe, "tensors", w.tensors);
        w.tensors = NULL;
        char *text = cJSON_Print(recipe);
        snprintf(path, sizeof path, "%s/%s", out_dir, SOTTO_SNAPSHOT_RECIPE);
        FILE *f = text ? fopen(path, "w") : NULL;
        int ok = f && fputs(text, f) >= 0 && fputc('\n', f) != EOF;
        if (f && fclose(f) != 0) ok = 0;
        free(text);
        if (!ok) rc = sotto_err_set(err, SOTTO_E_IO, "%s: cannot write", path);
    }
done:
    sotto_st_writer_free(w.st);
    cJSON_Delete(w.tensors);
    cJSON_Delete(recipe);
    for (int i = 0; i < w.n_owned; i++) free(w.owned[i]);
    free(w.owned);
    return rc;
}

int sotto_snapshot_compare(const sotto_model *a, const sotto_model *b, sotto_err *err) {
    if (a->n_slots != b->n_slots || memcmp(&a->hp, &b->hp, sizeof a->hp) != 0)
        return sotto_err_set(err, SOTTO_E_FORMAT, "the models have different shapes");
    for (int i = 0; i < a->n_slots; i++) {
        const sotto_slot *x = &a->slots[i], *y = &b->slots[i];
        if (x->filled != y->filled || strcmp(x->name, y->name) != 0)
            return sotto_err_set(err, SOTTO_E_FORMAT, "%s: present in one model only", x->name);
        if (!x->filled) continue;
        size_t n = (size_t)(x->rows * x->cols);
        if (!x->is_matrix) {
            if (memcmp(*x->vec, *y->vec, n * sizeof(float)) != 0)
                return sotto_err_set(err, SOTTO_E_FORMAT, "%s: values differ", x->name);
            continue;
        }
        const sotto_wmat *p = x->mat, *q = y->mat;
        if (p->fmt != q->fmt)
            return sotto_err_set(err, SOTTO_E_FORMAT, "%s: %s vs %s", x->name,
                                 sotto_wfmt_name(p->fmt), sotto_wfmt_name(q->fmt));
        size_t dbytes = sotto_wfmt_bytes(p->fmt, p->rows, p->cols);
        size_t sbytes = 0;
        switch (p->fmt) {
        case SOTTO_WFMT_Q8: sbytes = n / 32 * 4; break;
        case SOTTO_WFMT_NF4: sbytes = n / 64 * 4; break;
        case SOTTO_WFMT_NVFP4: sbytes = n / 16; break;
        default: break;
        }
        dbytes -= sbytes;
        int same_dq = !p->nf4_dq == !q->nf4_dq;
        if (same_dq && p->nf4_dq) {
            size_t nb = n / 64;
            same_dq = memcmp(p->nf4_dq->codes, q->nf4_dq->codes, nb) == 0 &&
                      memcmp(p->nf4_dq->nested_absmax, q->nf4_dq->nested_absmax,
                             (nb + 255) / 256 * sizeof(float)) == 0 &&
                      p->nf4_dq->offset == q->nf4_dq->offset;
            sbytes = 0;
        }
        if (!same_dq || memcmp(p->data, q->data, dbytes) != 0 ||
            (sbytes && memcmp(p->scales, q->scales, sbytes) != 0) ||
            (p->fmt == SOTTO_WFMT_NVFP4 && p->global_scale != q->global_scale))
            return sotto_err_set(err, SOTTO_E_FORMAT, "%s: %s weights differ", x->name,
                                 sotto_wfmt_name(p->fmt));
    }
    return SOTTO_OK;
}
