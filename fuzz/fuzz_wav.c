/* fuzz_wav.c - the WAV reader (stream/wav.c) on arbitrary bytes, with a
 * duration cap: it must fail cleanly or return audio within the bounds. */
#include "audio.h"
#include "log.h"

#include <stdint.h>
#include <stdlib.h>

static volatile float g_sink; /* keeps the reads of the output */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static int quiet;
    if (!quiet) sotto_log_set_level(SOTTO_LOG_ERROR), quiet = 1;
    sotto_audio a;
    sotto_err err;
    int rc = sotto_wav_read_mem_max(data, size, "fuzz", 60.0, &a, &err);
    if (rc == SOTTO_OK) {
        if (!a.samples || a.sample_rate < SOTTO_AUDIO_MIN_RATE || a.sample_rate > SOTTO_AUDIO_MAX_RATE ||
            (double)a.n > 60.0 * a.sample_rate || a.n > size)
            abort(); /* out of bounds: a bug */
        for (size_t i = 0; i < a.n; i++) g_sink += a.samples[i];
        sotto_audio_free(&a);
    } else if (a.samples) {
        abort();
    }
    return 0;
}
