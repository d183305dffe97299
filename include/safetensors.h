/* safetensors.h - reading and writing the safetensors format.
 *
 * Layout: u64 little-endian header length N, N bytes of JSON
 *   {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]},
 *    "__metadata__": {"key": "value", ...}}
 * then the data area; offsets are relative to its start.
 *
 * Reader: a sotto_st_file borrows a mapping owned by the caller (so that
 * the model can keep it for zero-copy tensors) and owns the parsed header.
 * Every tensor is bounds-checked against the file before use.
 * Writer: collects borrowed (name, dtype, shape, bytes) entries and writes
 * them with the data area and every tensor aligned to 64 bytes, so that
 * float arrays of a written file can be used in place after mmap.
 */
#ifndef SOTTO_SAFETENSORS_H
#define SOTTO_SAFETENSORS_H

#include "dtype.h"
#include "mapfile.h"
#include "sotto_err.h"

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdint.h>

typedef struct sotto_st_file {
    const char *path;
    const sotto_mapfile *map;
    cJSON *header;
    const unsigned char *data; /* start of the data area */
    size_t data_size;
} sotto_st_file;

typedef struct sotto_st_tensor {
    const char *name;
    sotto_dtype dtype;
    int rank;
    int64_t dims[8];
    int64_t count; /* elements */
    const void *data;
    size_t nbytes;
} sotto_st_tensor;

/* Parses the header of a mapped file. */
int sotto_st_open(sotto_st_file *f, const char *path, const sotto_mapfile *map, sotto_err *err);
void sotto_st_close(sotto_st_file *f); /* frees the header, not the mapping */

/* Describes one header entry (item of f->header); validates it. */
int sotto_st_item(const sotto_st_file *f, const cJSON *item, sotto_st_tensor *t, sotto_err *err);
/* Looks a tensor up by name: SOTTO_E_NOTFOUND (with no message) if absent. */
int sotto_st_get(const sotto_st_file *f, const char *name, sotto_st_tensor *t, sotto_err *err);

/* safetensors dtype string <-> sotto_dtype. */
sotto_dtype sotto_st_dtype(const char *s);
const char *sotto_st_dtype_name(sotto_dtype dt);

typedef struct sotto_st_writer sotto_st_writer;

sotto_st_writer *sotto_st_writer_create(void);
void sotto_st_writer_free(sotto_st_writer *w);
/* Adds a tensor; `data` is borrowed until sotto_st_writer_write returns.
 * The byte count must equal prod(dims) * size of dtype. */
int sotto_st_writer_add(sotto_st_writer *w, const char *name, sotto_dtype dt, int rank,
                        const int64_t *dims, const void *data, size_t nbytes, sotto_err *err);
/* Adds a string to __metadata__. */
int sotto_st_writer_meta(sotto_st_writer *w, const char *key, const char *value, sotto_err *err);
/* Writes the file (via path.tmp + rename). */
int sotto_st_writer_write(sotto_st_writer *w, const char *path, sotto_err *err);

#endif
