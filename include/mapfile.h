/* mapfile.h - read-only memory mapping of whole files, and small-file reads.
 *
 * A sotto_mapfile owns its mapping until sotto_mapfile_close(). Pointers
 * into `data` stay valid until then. Empty files map to data == NULL,
 * size == 0 (mmap cannot map zero bytes).
 */
#ifndef SOTTO_MAPFILE_H
#define SOTTO_MAPFILE_H

#include "sotto_err.h"

#include <stddef.h>

typedef struct sotto_mapfile {
    const unsigned char *data;
    size_t size;
} sotto_mapfile;

int sotto_mapfile_open(const char *path, sotto_mapfile *mf, sotto_err *err);

/* Tells the kernel that [p, p + len) of the mapping will not be read again,
 * so that its pages leave the resident set (they are re-read from the file
 * if touched later). Used while loading to keep peak memory low. */
void sotto_mapfile_release(const sotto_mapfile *mf, const void *p, size_t len);
void sotto_mapfile_close(sotto_mapfile *mf); /* accepts a zeroed struct */

/* Reads a whole file into a malloc'd, NUL-terminated buffer (caller frees).
 * Fails with SOTTO_E_RANGE if the file is larger than max_bytes. */
int sotto_read_file(const char *path, size_t max_bytes, char **out, size_t *out_len,
                    sotto_err *err);

/* 1 if path exists and is a regular file. */
int sotto_file_exists(const char *path);

/* Joins dir and name with '/' into out (size outsz); SOTTO_E_RANGE if too long. */
int sotto_path_join(char *out, size_t outsz, const char *dir, const char *name);

#endif
