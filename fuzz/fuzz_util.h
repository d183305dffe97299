/* fuzz_util.h - what the file-based harnesses share: one private temporary
 * directory per process, files written into it, quiet logs. */
#ifndef SOTTO_FUZZ_UTIL_H
#define SOTTO_FUZZ_UTIL_H

#define _POSIX_C_SOURCE 200809L
#include "log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char fuzz_dir_[256];

/* The process's directory (created, and removed at exit, on first use). */
static inline void fuzz_rmdir_(void) {
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", fuzz_dir_);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", fuzz_dir_);
}

static inline const char *fuzz_dir(void) {
    if (!fuzz_dir_[0]) {
        snprintf(fuzz_dir_, sizeof fuzz_dir_, "/tmp/sotto_fuzz_XXXXXX");
        if (!mkdtemp(fuzz_dir_)) abort();
        atexit(fuzz_rmdir_);
        sotto_log_set_level(SOTTO_LOG_ERROR);
    }
    return fuzz_dir_;
}

/* Writes n bytes to DIR/name (replacing it); aborts if it cannot. */
static inline void fuzz_write(const char *name, const void *data, size_t n) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", fuzz_dir(), name);
    FILE *f = fopen(path, "wb");
    if (!f || (n && fwrite(data, 1, n, f) != n) || fclose(f) != 0) abort();
}

static inline void fuzz_remove(const char *name) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", fuzz_dir(), name);
    unlink(path);
}

#endif
