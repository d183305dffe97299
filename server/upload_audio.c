/* upload_audio.c - uploaded audio files to 16 kHz mono float: WAV through
 * sotto's own reader, everything else libsndfile reads from memory (FLAC,
 * Ogg Vorbis, Ogg Opus, MP3, AIFF, ...). */
#define _POSIX_C_SOURCE 200809L
#include "compat.h"

#include "audio.h"
#include "resample.h"

#include <sndfile.h>
#include <stdlib.h>
#include <string.h>

typedef struct memfile {
    const unsigned char *p;
    sf_count_t len, pos;
} memfile;

static sf_count_t mf_len(void *u) { return ((memfile *)u)->len; }
static sf_count_t mf_tell(void *u) { return ((memfile *)u)->pos; }
static sf_count_t mf_seek(sf_count_t off, int whence, void *u) {
    memfile *m = u;
    sf_count_t base = whence == SEEK_SET ? 0 : whence == SEEK_CUR ? m->pos : m->len;
    sf_count_t np = base + off;
    if (np < 0 || np > m->len) return -1;
    return m->pos = np;
}
static sf_count_t mf_read(void *dst, sf_count_t n, void *u) {
    memfile *m = u;
    if (n > m->len - m->pos) n = m->len - m->pos;
    if (n <= 0) return 0;
    memcpy(dst, m->p + m->pos, (size_t)n);
    m->pos += n;
    return n;
}
static sf_count_t mf_write(const void *src, sf_count_t n, void *u) {
    (void)src, (void)n, (void)u;
    return 0;
}

/* At most this much audio (a 25 MB MP3 can be an hour; 4 h is a bound on memory). */
#define MAX_UPLOAD_SECONDS (4 * 3600.0)

static int sndfile_decode(const void *data, size_t len, sotto_audio *a, sotto_err *err) {
    memfile mf = {data, (sf_count_t)len, 0};
    SF_VIRTUAL_IO io = {mf_len, mf_seek, mf_read, mf_write, mf_tell};
    SF_INFO info;
    memset(&info, 0, sizeof info);
    SNDFILE *f = sf_open_virtual(&io, SFM_READ, &info, &mf);
    if (!f) return sotto_err_set(err, SOTTO_E_FORMAT, "not a WAV file, and libsndfile says: %s", sf_strerror(NULL));
    if (info.channels < 1 || info.channels > 32 || info.samplerate < 1000 || info.samplerate > 384000) {
        sf_close(f);
        return sotto_err_set(err, SOTTO_E_FORMAT, "unsupported audio: %d channels at %d Hz", info.channels,
                             info.samplerate);
    }
    size_t cap = 1 << 16, n = 0, max = (size_t)(MAX_UPLOAD_SECONDS * info.samplerate);
    float *mono = malloc(sizeof(float) * cap), *frames = malloc(sizeof(float) * 4096 * (size_t)info.channels);
    if (!mono || !frames) {
        free(mono), free(frames), sf_close(f);
        return sotto_err_set(err, SOTTO_E_NOMEM, "out of memory");
    }
    for (;;) {
        sf_count_t got = sf_readf_float(f, frames, 4096);
        if (got <= 0) break;
        if (n + (size_t)got > max) {
            free(mono), free(frames), sf_close(f);
            return sotto_err_set(err, SOTTO_E_RANGE, "the audio is longer than %.0f hours", MAX_UPLOAD_SECONDS / 3600);
        }
        if (n + (size_t)got > cap) {
            while (n + (size_t)got > cap) cap *= 2;
            float *nb = realloc(mono, sizeof(float) * cap);
            if (!nb) {
                free(mono), free(frames), sf_close(f);
                return sotto_err_set(err, SOTTO_E_NOMEM, "out of memory");
            }
            mono = nb;
        }
        for (sf_count_t i = 0; i < got; i++) {
            float acc = 0;
            for (int c = 0; c < info.channels; c++) acc += frames[i * info.channels + c];
            mono[n++] = acc / (float)info.channels;
        }
    }
    int rc = sf_error(f);
    free(frames);
    sf_close(f);
    if (rc) {
        free(mono);
        return sotto_err_set(err, SOTTO_E_FORMAT, "the audio data is corrupt: %s", sf_error_number(rc));
    }
    a->samples = mono;
    a->n = n;
    a->sample_rate = info.samplerate;
    a->channels_in = info.channels;
    return SOTTO_OK;
}

int srv_decode_upload(const void *data, size_t len, float **out, size_t *n, sotto_err *err) {
    sotto_audio a;
    memset(&a, 0, sizeof a);
    int rc = len >= 12 && !memcmp(data, "RIFF", 4) && !memcmp((const char *)data + 8, "WAVE", 4)
                 ? sotto_wav_read_mem(data, len, "upload", &a, err)
                 : sndfile_decode(data, len, &a, err);
    if (rc) return rc;
    if (a.n == 0) {
        sotto_audio_free(&a);
        return sotto_err_set(err, SOTTO_E_FORMAT, "the file holds no audio");
    }
    rc = sotto_resample(a.samples, a.n, a.sample_rate, 16000, SOTTO_RESAMPLE_QUALITY_FILE, out, n, err);
    sotto_audio_free(&a);
    return rc;
}
