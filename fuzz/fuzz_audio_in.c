/* fuzz_audio_in.c - a session's audio decoding (stream/audio_in.c): the
 * live path of /v1/stream, /v1/realtime and /v1/listen (Opus packets after
 * the Deepgram dialect's Ogg demuxing, PCM, G.711 turned into PCM).
 *
 * Input: byte 0 picks the encoding (s16, f32, opus), byte 1 the rate, byte
 * 2 the channels; the rest is messages, each a little-endian u16 length and
 * that many bytes. Every message must decode into at most
 * sotto_audio_in_max_out() samples, or be rejected whole. */
#include "audio_in.h"

#include "log.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static volatile float g_sink; /* keeps the reads of the output */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static const int rates[] = {8000, 11025, 16000, 22050, 24000, 32000, 44100, 48000};
    static int quiet;
    if (!quiet) sotto_log_set_level(SOTTO_LOG_ERROR), quiet = 1;
    if (size < 3) return 0;
    sotto_encoding enc = (sotto_encoding)(data[0] % 3);
    sotto_err err;
    sotto_audio_in *a = sotto_audio_in_create(enc, rates[data[1] % 8], 1 + data[2] % 2, &err);
    if (!a) abort();
    size_t off = 3;
    while (size - off >= 2) {
        size_t len = (size_t)data[off] | (size_t)data[off + 1] << 8;
        off += 2;
        if (len > size - off) len = size - off;
        size_t cap = sotto_audio_in_max_out(a, len), n = 0;
        float *out = malloc(sizeof(float) * (cap ? cap : 1));
        if (!out) abort();
        int rc = sotto_audio_in_push(a, data + off, len, out, cap, &n, &err);
        if (n > cap || (rc != SOTTO_OK && rc != SOTTO_E_FORMAT)) abort();
        for (size_t i = 0; i < n; i++) g_sink += out[i];
        free(out);
        off += len;
    }
    float tail[256];
    size_t n = 0;
    if (sotto_audio_in_flush(a, tail, 256, &n) != SOTTO_OK || n > 256) abort();
    sotto_audio_in_free(a);
    return 0;
}
