#define _DEFAULT_SOURCE /* madvise */
#define _POSIX_C_SOURCE 200809L
#include "mapfile.h"

#include <errno.h>
#include <stdint.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

int sotto_mapfile_open(const char *path, sotto_mapfile *mf, sotto_err *err) {
    mf->data = NULL;
    mf->size = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int code = errno == ENOENT ? SOTTO_E_NOTFOUND : SOTTO_E_IO;
        return sotto_err_set(err, code, "%s: cannot open: %s", path, strerror(errno));
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return sotto_err_set(err, SOTTO_E_IO, "%s: cannot stat: %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return sotto_err_set(err, SOTTO_E_IO, "%s: not a regular file", path);
    }
    if (st.st_size == 0) {
        close(fd);
        return SOTTO_OK;
    }
    void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    int e = errno;
    close(fd);
    if (p == MAP_FAILED)
        return sotto_err_set(err, SOTTO_E_IO, "%s: cannot mmap: %s", path, strerror(e));
    mf->data = p;
    mf->size = (size_t)st.st_size;
    return SOTTO_OK;
}

void sotto_mapfile_release(const sotto_mapfile *mf, const void *p, size_t len) {
    if (!mf || !mf->data || !p) return;
    const unsigned char *b = p, *e = b + len;
    if (b < mf->data) b = mf->data;
    if (e > mf->data + mf->size) e = mf->data + mf->size;
    long pg = sysconf(_SC_PAGESIZE);
    if (pg <= 0) return;
    uintptr_t lo = ((uintptr_t)b + (uintptr_t)pg - 1) & ~((uintptr_t)pg - 1); /* whole pages only */
    uintptr_t hi = (uintptr_t)e & ~((uintptr_t)pg - 1);
    if (hi > lo) madvise((void *)lo, hi - lo, MADV_DONTNEED);
}

void sotto_mapfile_close(sotto_mapfile *mf) {
    if (mf && mf->data) munmap((void *)mf->data, mf->size);
    if (mf) {
        mf->data = NULL;
        mf->size = 0;
    }
}

int sotto_read_file(const char *path, size_t max_bytes, char **out, size_t *out_len,
                    sotto_err *err) {
    *out = NULL;
    if (out_len) *out_len = 0;
    FILE *f = fopen(path, "rb");
    if (!f) {
        int code = errno == ENOENT ? SOTTO_E_NOTFOUND : SOTTO_E_IO;
        return sotto_err_set(err, code, "%s: cannot open: %s", path, strerror(errno));
    }
    size_t cap = 65536, len = 0;
    char *buf = malloc(cap + 1);
    if (!buf) {
        fclose(f);
        return sotto_err_set(err, SOTTO_E_NOMEM, "%s: out of memory", path);
    }
    for (;;) {
        if (len == cap) {
            if (cap >= max_bytes) {
                free(buf);
                fclose(f);
                return sotto_err_set(err, SOTTO_E_RANGE, "%s: larger than %zu bytes", path,
                                     max_bytes);
            }
            cap *= 2;
            if (cap > max_bytes) cap = max_bytes;
            char *nb = realloc(buf, cap + 1);
            if (!nb) {
                free(buf);
                fclose(f);
                return sotto_err_set(err, SOTTO_E_NOMEM, "%s: out of memory", path);
            }
            buf = nb;
        }
        size_t n = fread(buf + len, 1, cap - len, f);
        len += n;
        if (n == 0) break;
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        return sotto_err_set(err, SOTTO_E_IO, "%s: read error", path);
    }
    buf[len] = '\0';
    *out = buf;
    if (out_len) *out_len = len;
    return SOTTO_OK;
}

int sotto_file_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

int sotto_path_join(char *out, size_t outsz, const char *dir, const char *name) {
    int n = snprintf(out, outsz, "%s/%s", dir, name);
    if (n < 0 || (size_t)n >= outsz) return SOTTO_E_RANGE;
    return SOTTO_OK;
}
