/* safetensors.c - safetensors reader and writer (see safetensors.h). */
#define _POSIX_C_SOURCE 200809L
#include "safetensors.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const struct {
    const char *name;
    sotto_dtype dt;
} k_dtypes[] = {
    {"F32", SOTTO_DT_F32}, {"F16", SOTTO_DT_F16}, {"BF16", SOTTO_DT_BF16},
    {"I8", SOTTO_DT_I8},   {"I16", SOTTO_DT_I16}, {"I32", SOTTO_DT_I32},
    {"U8", SOTTO_DT_U8},   {"F8_E4M3", SOTTO_DT_F8E4M3},
};

sotto_dtype sotto_st_dtype(const char *s) {
    for (size_t i = 0; i < sizeof k_dtypes / sizeof k_dtypes[0]; i++)
        if (strcmp(s, k_dtypes[i].name) == 0) return k_dtypes[i].dt;
    return SOTTO_DT_OTHER;
}

const char *sotto_st_dtype_name(sotto_dtype dt) {
    for (size_t i = 0; i < sizeof k_dtypes / sizeof k_dtypes[0]; i++)
        if (k_dtypes[i].dt == dt) return k_dtypes[i].name;
    return "?";
}

int sotto_st_open(sotto_st_file *f, const char *path, const sotto_mapfile *map, sotto_err *err) {
    memset(f, 0, sizeof *f);
    f->path = path;
    f->map = map;
    if (map->size < 8)
        return sotto_err_set(err, SOTTO_E_FORMAT, "%s: truncated (%zu bytes, no header)", path,
                             map->size);
    uint64_t hlen;
    memcpy(&hlen, map->data, 8);
    if (hlen < 2 || hlen > map->size - 8 || hlen > (100u << 20))
        return sotto_err_set(err, SOTTO_E_FORMAT,
                             "%s: header length %llu does not fit the file of %zu bytes", path,
                             (unsigned long long)hlen, map->size);
    f->header = cJSON_ParseWithLength((const char *)map->data + 8, (size_t)hlen);
    if (!f->header || !cJSON_IsObject(f->header)) {
        cJSON_Delete(f->header);
        f->header = NULL;
        return sotto_err_set(err, SOTTO_E_FORMAT, "%s: header is not valid JSON", path);
    }
    f->data = map->data + 8 + hlen;
    f->data_size = map->size - 8 - (size_t)hlen;
    return SOTTO_OK;
}

void sotto_st_close(sotto_st_file *f) {
    if (f) {
        cJSON_Delete(f->header);
        f->header = NULL;
    }
}

int sotto_st_item(const sotto_st_file *f, const cJSON *item, sotto_st_tensor *t, sotto_err *err) {
    const char *name = item->string;
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(item, "dtype");
    const cJSON *shape = cJSON_GetObjectItemCaseSensitive(item, "shape");
    const cJSON *offs = cJSON_GetObjectItemCaseSensitive(item, "data_offsets");
    if (!cJSON_IsString(dt) || !cJSON_IsArray(shape) || !cJSON_IsArray(offs) ||
        cJSON_GetArraySize(offs) != 2 || cJSON_GetArraySize(shape) > 8)
        return sotto_err_set(err, SOTTO_E_FORMAT, "%s: bad header entry for '%s'", f->path, name);
    memset(t, 0, sizeof *t);
    t->name = name;
    t->dtype = sotto_st_dtype(dt->valuestring);
    t->rank = cJSON_GetArraySize(shape);
    int64_t count = 1;
    for (int d = 0; d < t->rank; d++) {
        const cJSON *dim = cJSON_GetArrayItem(shape, d);
        if (!cJSON_IsNumber(dim) || dim->valuedouble < 0 || dim->valuedouble > 1e12)
            return sotto_err_set(err, SOTTO_E_FORMAT, "%s: bad shape for '%s'", f->path, name);
        int64_t v = (int64_t)dim->valuedouble;
        if (v && count > ((int64_t)1 << 40) / v)
            return sotto_err_set(err, SOTTO_E_FORMAT, "%s: '%s' is implausibly large", f->path,
                                 name);
        count *= v;
        t->dims[d] = v;
    }
    t->count = count;
    const cJSON *b = cJSON_GetArrayItem(offs, 0), *e = cJSON_GetArrayItem(offs, 1);
    if (!cJSON_IsNumber(b) || !cJSON_IsNumber(e) || b->valuedouble < 0 ||
        e->valuedouble < b->valuedouble || e->valuedouble > (double)f->data_size)
        return sotto_err_set(err, SOTTO_E_FORMAT,
                             "%s: tensor '%s' lies outside the file (data offsets past %zu "
                             "data bytes; truncated?)",
                             f->path, name, f->data_size);
    size_t es = sotto_dtype_size(t->dtype);
    t->nbytes = (size_t)(e->valuedouble - b->valuedouble);
    if (es && t->nbytes != (size_t)count * es)
        return sotto_err_set(err, SOTTO_E_FORMAT, "%s: tensor '%s' has %zu bytes, shape needs %zu",
                             f->path, name, t->nbytes, (size_t)count * es);
    t->data = f->data + (size_t)b->valuedouble;
    return SOTTO_OK;
}

int sotto_st_get(const sotto_st_file *f, const char *name, sotto_st_tensor *t, sotto_err *err) {
    const cJSON *item = cJSON_GetObjectItemCaseSensitive(f->header, name);
    if (!item) return SOTTO_E_NOTFOUND;
    return sotto_st_item(f, item, t, err);
}

/* ---- writer ------------------------------------------------------------- */

typedef struct st_entry {
    char *name;
    sotto_dtype dt;
    int rank;
    int64_t dims[8];
    const void *data;
    size_t nbytes;
} st_entry;

struct sotto_st_writer {
    st_entry *e;
    int n, cap;
    cJSON *meta;
};

sotto_st_writer *sotto_st_writer_create(void) {
    sotto_st_writer *w = calloc(1, sizeof *w);
    if (w && !(w->meta = cJSON_CreateObject())) {
        free(w);
        return NULL;
    }
    return w;
}

void sotto_st_writer_free(sotto_st_writer *w) {
    if (!w) return;
    for (int i = 0; i < w->n; i++) free(w->e[i].name);
    free(w->e);
    cJSON_Delete(w->meta);
    free(w);
}

int sotto_st_writer_add(sotto_st_writer *w, const char *name, sotto_dtype dt, int rank,
                        const int64_t *dims, const void *data, size_t nbytes, sotto_err *err) {
    size_t count = 1;
    for (int d = 0; d < rank; d++) count *= (size_t)dims[d];
    if (rank < 0 || rank > 8 || count * sotto_dtype_size(dt) != nbytes)
        return sotto_err_set(err, SOTTO_E_INTERNAL, "tensor %s: %zu bytes do not fit its shape",
                             name, nbytes);
    if (w->n == w->cap) {
        int cap = w->cap ? w->cap * 2 : 64;
        st_entry *ne = realloc(w->e, sizeof *ne * (size_t)cap);
        if (!ne) return sotto_err_set(err, SOTTO_E_NOMEM, "out of memory");
        w->e = ne;
        w->cap = cap;
    }
    st_entry *e = &w->e[w->n];
    if (!(e->name = strdup(name))) return sotto_err_set(err, SOTTO_E_NOMEM, "out of memory");
    e->dt = dt;
    e->rank = rank;
    for (int d = 0; d < rank; d++) e->dims[d] = dims[d];
    e->data = data;
    e->nbytes = nbytes;
    w->n++;
    return SOTTO_OK;
}

int sotto_st_writer_meta(sotto_st_writer *w, const char *key, const char *value, sotto_err *err) {
    if (!cJSON_AddStringToObject(w->meta, key, value))
        return sotto_err_set(err, SOTTO_E_NOMEM, "out of memory");
    return SOTTO_OK;
}

#define ST_ALIGN 64

int sotto_st_writer_write(sotto_st_writer *w, const char *path, sotto_err *err) {
    cJSON *h = cJSON_CreateObject();
    if (!h) return sotto_err_set(err, SOTTO_E_NOMEM, "out of memory");
    size_t off = 0;
    for (int i = 0; i < w->n; i++) {
        st_entry *e = &w->e[i];
        off = (off + ST_ALIGN - 1) & ~(size_t)(ST_ALIGN - 1);
        cJSON *t = cJSON_AddObjectToObject(h, e->name);
        cJSON *shape = t ? cJSON_AddArrayToObject(t, "shape") : NULL;
        cJSON *offs = t ? cJSON_AddArrayToObject(t, "data_offsets") : NULL;
        if (!t || !shape || !offs || !cJSON_AddStringToObject(t, "dtype", sotto_st_dtype_name(e->dt))) {
            cJSON_Delete(h);
            return sotto_err_set(err, SOTTO_E_NOMEM, "out of memory");
        }
        for (int d = 0; d < e->rank; d++) cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)e->dims[d]));
        cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)off));
        cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)(off + e->nbytes)));
        off += e->nbytes;
    }
    cJSON_AddItemReferenceToObject(h, "__metadata__", w->meta);
    char *json = cJSON_PrintUnformatted(h);
    cJSON_Delete(h);
    if (!json) return sotto_err_set(err, SOTTO_E_NOMEM, "out of memory");
    size_t jlen = strlen(json);
    /* pad with spaces so that the data area starts 64-byte aligned */
    size_t hlen = ((8 + jlen + ST_ALIGN - 1) & ~(size_t)(ST_ALIGN - 1)) - 8;
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *fp = fopen(tmp, "wb");
    int rc = SOTTO_OK;
    if (!fp) {
        free(json);
        return sotto_err_set(err, SOTTO_E_IO, "%s: cannot create", tmp);
    }
    uint64_t h64 = hlen;
    static const char zeros[ST_ALIGN] = {0};
    int ok = fwrite(&h64, 8, 1, fp) == 1 && fwrite(json, 1, jlen, fp) == jlen;
    for (size_t i = jlen; ok && i < hlen; i++) ok = fputc(' ', fp) != EOF;
    size_t pos = 0;
    for (int i = 0; ok && i < w->n; i++) {
        size_t start = (pos + ST_ALIGN - 1) & ~(size_t)(ST_ALIGN - 1);
        ok = fwrite(zeros, 1, start - pos, fp) == start - pos &&
             (w->e[i].nbytes == 0 || fwrite(w->e[i].data, 1, w->e[i].nbytes, fp) == w->e[i].nbytes);
        pos = start + w->e[i].nbytes;
    }
    free(json);
    if (fclose(fp) != 0) ok = 0;
    if (!ok || rename(tmp, path) != 0) {
        remove(tmp);
        rc = sotto_err_set(err, SOTTO_E_IO, "%s: write failed", path);
    }
    return rc;
}
