/* vad_model.c - the default location of the Silero VAD weights. */
#define _POSIX_C_SOURCE 200809L
#include "vad_model.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int is_file(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

const char *sotto_vad_model_default(char *buf, size_t bufsz) {
    const char *env = getenv("SOTTO_VAD_MODEL");
    if (env && *env) {
        snprintf(buf, bufsz, "%s", env);
        return is_file(buf) ? buf : NULL;
    }
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = '\0';
        char *slash = strrchr(exe, '/');
        if (slash) {
            *slash = '\0';
            if (snprintf(buf, bufsz, "%s/../%s", exe, SOTTO_VAD_MODEL_REL) < (int)bufsz && is_file(buf))
                return buf;
        }
    }
    snprintf(buf, bufsz, "%s", SOTTO_VAD_MODEL_REL);
    return is_file(buf) ? buf : NULL;
}
