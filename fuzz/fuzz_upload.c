/* fuzz_upload.c - the upload decoders (server/upload_audio.c: WAV, and
 * whatever libsndfile reads: FLAC, Ogg Vorbis/Opus, MP3, AIFF, ...) on
 * arbitrary bytes with a 5 s cap: a clean error, or 16 kHz audio within
 * the cap. */
#include "upload_audio.h"

#include "log.h"

#include <stdint.h>
#include <stdlib.h>

#define CAP_S 5.0

static volatile float g_sink; /* keeps the reads of the output */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static int quiet;
    if (!quiet) sotto_log_set_level(SOTTO_LOG_ERROR), quiet = 1;
    float *out = NULL;
    size_t n = 0;
    sotto_err err;
    int rc = srv_decode_upload_max(data, size, CAP_S, &out, &n, &err);
    if (rc == SOTTO_OK) {
        if (!out || n == 0 || n > (size_t)(CAP_S * 16000) + 64) abort();
        for (size_t i = 0; i < n; i++) g_sink += out[i];
    } else if (out || !err.msg[0]) {
        abort();
    }
    free(out);
    return 0;
}
