/* calib.c - calibration statistics: recording and reading (see calib.h). */
#define _POSIX_C_SOURCE 200809L
#include "calib.h"

#include "linear.h"
#include "model.h"
#include "safetensors.h"

#include <cjson/cJSON.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CALIB_TAG "1"
#define IMPORTANCE_FLOOR 0.01f

void sotto_calib_model_string(const sotto_model *m, char *buf, size_t bufsz) {
    snprintf(buf, bufsz, "mels %d width %d layers %d+%d vocab %d", m->hp.n_mels,
             m->hp.n_audio_state, m->hp.n_audio_layer, m->hp.n_text_layer, m->hp.n_vocab);
}

/* ---- reading ---------------------------------------------------------------- */

typedef struct calib_entry {
    char name[48];
    int64_t cols;
    float *v;
} calib_entry;

struct sotto_calib {
    char *path;
    char model[128];
    calib_entry *e;
    int n;
};

void sotto_calib_free(sotto_calib *c) {
    if (!c) return;
    for (int i = 0; i < c->n; i++) free(c->e[i].v);
    free(c->e);
    free(c->path);
    free(c);
}

static int add_entry(sotto_calib *c, const sotto_st_tensor *t, sotto_err *err) {
    if (t->dtype != SOTTO_DT_F32 || t->rank != 1 || t->count < 1)
        return sotto_err_set(err, SOTTO_E_FORMAT, "%s: '%s' is not a float32 vector", c->path,
                             t->name);
    if (strlen(t->name) >= sizeof c->e[0].name)
        return sotto_err_set(err, SOTTO_E_FORMAT, "%s: tensor name '%.60s' too long", c->path,
                             t->name);
    calib_entry *e = &c->e[c->n];
    float *v = malloc(sizeof(float) * (size_t)t->count);
    if (!v) return sotto_err_set(err, SOTTO_E_NOMEM, "out of memory");
    memcpy(v, t->data, sizeof(float) * (size_t)t->count);
    double sum = 0.0;
    for (int64_t i = 0; i < t->count; i++) {
        if (!(v[i] >= 0.0f) || v[i] - v[i] != 0.0f) {
            free(v);
            return sotto_err_set(err, SOTTO_E_FORMAT,
                                 "%s: '%s' holds a negative or non-finite value at %lld", c->path,
                                 t->name, (long long)i);
        }
        sum += v[i];
    }
    float mean = (float)(sum / (double)t->count);
    for (int64_t i = 0; i < t->count; i++)
        v[i] = (mean > 0.0f ? v[i] / mean : 1.0f) + IMPORTANCE_FLOOR;
    snprintf(e->name, sizeof e->name, "%s", t->name);
    e->cols = t->count;
    e->v = v;
    c->n++;
    return SOTTO_OK;
}

static int read_entries(sotto_calib *c, const sotto_st_file *f, sotto_err *err) {
    const cJSON *meta = cJSON_GetObjectItemCaseSensitive(f->header, "__metadata__");
    const cJSON *tag = meta ? cJSON_GetObjectItemCaseSensitive(meta, "sotto_calib") : NULL;
    const cJSON *model = meta ? cJSON_GetObjectItemCaseSensitive(meta, "model") : NULL;
    if (!cJSON_IsString(tag) || strcmp(tag->valuestring, CALIB_TAG) != 0 || !cJSON_IsString(model))
        return sotto_err_set(err, SOTTO_E_FORMAT,
                             "%s: not a sotto calibration file (no sotto_calib metadata)", c->path);
    snprintf(c->model, sizeof c->model, "%s", model->valuestring);
    int count = cJSON_GetArraySize(f->header);
    c->e = calloc((size_t)(count > 0 ? count : 1), sizeof *c->e);
    if (!c->e) return sotto_err_set(err, SOTTO_E_NOMEM, "out of memory");
    for (const cJSON *it = f->header->child; it; it = it->next) {
        if (strcmp(it->string, "__metadata__") == 0) continue;
        sotto_st_tensor t;
        int rc = sotto_st_item(f, it, &t, err);
        if (rc == 0) rc = add_entry(c, &t, err);
        if (rc) return rc;
    }
    if (c->n == 0) return sotto_err_set(err, SOTTO_E_FORMAT, "%s: holds no tensors", c->path);
    return SOTTO_OK;
}

sotto_calib *sotto_calib_load(const char *path, sotto_err *err) {
    sotto_calib *c = calloc(1, sizeof *c);
    if (!c || !(c->path = strdup(path))) {
        free(c);
        sotto_err_set(err, SOTTO_E_NOMEM, "out of memory");
        return NULL;
    }
    sotto_mapfile map = {0};
    sotto_st_file f;
    memset(&f, 0, sizeof f);
    int rc = sotto_mapfile_open(path, &map, err);
    if (rc == 0) rc = sotto_st_open(&f, path, &map, err);
    if (rc == 0) rc = read_entries(c, &f, err);
    sotto_st_close(&f);
    sotto_mapfile_close(&map);
    if (rc) {
        sotto_calib_free(c);
        return NULL;
    }
    return c;
}

const float *sotto_calib_get(const sotto_calib *c, const char *name, int64_t cols) {
    for (int i = 0; c && i < c->n; i++)
        if (strcmp(c->e[i].name, name) == 0) return c->e[i].cols == cols ? c->e[i].v : NULL;
    return NULL;
}

const char *sotto_calib_model(const sotto_calib *c) { return c->model; }
const char *sotto_calib_path(const sotto_calib *c) { return c->path; }

/* ---- recording ---------------------------------------------------------------- */

typedef struct rec_entry {
    const sotto_slot *slot;
    double *sum; /* [cols] sum of x^2 */
    int64_t rows;
} rec_entry;

struct sotto_calib_rec {
    const sotto_model *m;
    rec_entry *e;
    int n;
    cJSON *clips;
    pthread_mutex_t lock;
};

static atomic_int g_recording;

static void observe(void *ctx, const sotto_wmat *w, const float *x, int n) {
    sotto_calib_rec *r = ctx;
    pthread_mutex_lock(&r->lock);
    for (int i = 0; i < r->n; i++) {
        rec_entry *e = &r->e[i];
        if (e->slot->mat != w) continue;
        const int64_t cols = e->slot->cols;
        for (int row = 0; row < n; row++) {
            const float *xr = x + (size_t)row * (size_t)cols;
            for (int64_t j = 0; j < cols; j++) e->sum[j] += (double)xr[j] * (double)xr[j];
        }
        e->rows += n;
        break;
    }
    pthread_mutex_unlock(&r->lock);
}

void sotto_calib_rec_free(sotto_calib_rec *r) {
    if (!r) return;
    sotto_linear_set_observer(NULL, NULL);
    atomic_store(&g_recording, 0);
    for (int i = 0; i < r->n; i++) free(r->e[i].sum);
    free(r->e);
    cJSON_Delete(r->clips);
    pthread_mutex_destroy(&r->lock);
    free(r);
}

sotto_calib_rec *sotto_calib_rec_start(const sotto_model *m, sotto_err *err) {
    int expect = 0;
    if (!atomic_compare_exchange_strong(&g_recording, &expect, 1)) {
        sotto_err_set(err, SOTTO_E_INVALID, "a calibration recorder is already running");
        return NULL;
    }
    sotto_calib_rec *r = calloc(1, sizeof *r);
    if (!r) {
        atomic_store(&g_recording, 0);
        sotto_err_set(err, SOTTO_E_NOMEM, "out of memory");
        return NULL;
    }
    pthread_mutex_init(&r->lock, NULL);
    r->m = m;
    r->e = calloc((size_t)(m->n_slots > 0 ? m->n_slots : 1), sizeof *r->e);
    r->clips = cJSON_CreateArray();
    if (!r->e || !r->clips) goto nomem;
    for (int i = 0; i < m->n_slots; i++) {
        const sotto_slot *s = &m->slots[i];
        if (!s->is_matrix || s->policy_part < 0 || !s->mat) continue;
        rec_entry *e = &r->e[r->n];
        e->slot = s;
        if (!(e->sum = calloc((size_t)s->cols, sizeof(double)))) goto nomem;
        r->n++;
    }
    sotto_linear_set_observer(observe, r);
    return r;
nomem:
    sotto_calib_rec_free(r);
    sotto_err_set(err, SOTTO_E_NOMEM, "out of memory");
    return NULL;
}

int sotto_calib_rec_add_clip(sotto_calib_rec *r, const char *file, size_t bytes, uint32_t crc32,
                             sotto_err *err) {
    const char *base = strrchr(file, '/');
    base = base ? base + 1 : file;
    char hex[16];
    snprintf(hex, sizeof hex, "%08x", (unsigned)crc32);
    cJSON *o = cJSON_CreateObject();
    if (!o || !cJSON_AddStringToObject(o, "file", base) ||
        !cJSON_AddNumberToObject(o, "bytes", (double)bytes) ||
        !cJSON_AddStringToObject(o, "crc32", hex) || !cJSON_AddItemToArray(r->clips, o)) {
        cJSON_Delete(o);
        return sotto_err_set(err, SOTTO_E_NOMEM, "out of memory");
    }
    return SOTTO_OK;
}

int64_t sotto_calib_rec_rows(const sotto_calib_rec *r, const char *name) {
    for (int i = 0; i < r->n; i++)
        if (strcmp(r->e[i].slot->name, name) == 0) return r->e[i].rows;
    return 0;
}

int sotto_calib_rec_save(const sotto_calib_rec *r, const char *path, sotto_err *err) {
    for (int i = 0; i < r->n; i++)
        if (r->e[i].rows == 0)
            return sotto_err_set(err, SOTTO_E_INVALID,
                                 "weight %s saw no input: record some audio first",
                                 r->e[i].slot->name);
    float **means = calloc((size_t)(r->n > 0 ? r->n : 1), sizeof *means);
    sotto_st_writer *w = sotto_st_writer_create();
    char *clips = cJSON_PrintUnformatted(r->clips);
    int rc = SOTTO_OK;
    if (!means || !w || !clips) {
        rc = sotto_err_set(err, SOTTO_E_NOMEM, "out of memory");
        goto done;
    }
    for (int i = 0; i < r->n && rc == 0; i++) {
        const rec_entry *e = &r->e[i];
        int64_t cols = e->slot->cols;
        if (!(means[i] = malloc(sizeof(float) * (size_t)cols))) {
            rc = sotto_err_set(err, SOTTO_E_NOMEM, "out of memory");
            break;
        }
        for (int64_t j = 0; j < cols; j++) means[i][j] = (float)(e->sum[j] / (double)e->rows);
        rc = sotto_st_writer_add(w, e->slot->name, SOTTO_DT_F32, 1, &cols, means[i],
                                 sizeof(float) * (size_t)cols, err);
    }
    char model[128];
    sotto_calib_model_string(r->m, model, sizeof model);
    if (rc == 0) rc = sotto_st_writer_meta(w, "sotto_calib", CALIB_TAG, err);
    if (rc == 0) rc = sotto_st_writer_meta(w, "model", model, err);
    if (rc == 0) rc = sotto_st_writer_meta(w, "clips", clips, err);
    if (rc == 0) rc = sotto_st_writer_write(w, path, err);
done:
    if (means)
        for (int i = 0; i < r->n; i++) free(means[i]);
    free(means);
    free(clips);
    sotto_st_writer_free(w);
    return rc;
}
