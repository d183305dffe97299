/* upload_audio.c - uploaded audio files to 16 kHz mono float: WAV through
 * sotto's own reader, everything else libsndfile reads from memory (FLAC,
 * Ogg Vorbis, Ogg Opus, MP3, AIFF, ...). */
#define _POSIX_C_SOURCE 200809L
#include "upload_audio.h"

#include "compat.h"

#include "audio.h"
#include "resample.h"

#include <math.h>
#include <sndfile.h>
#include <stdint.h>
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

/* The cap when none is given (a 25 MB MP3 can be an hour). */
#define UPLOAD_DEFAULT_MAX_SECONDS (4 * 3600.0)
#define UPLOAD_CHUNK 8192 /* samples (all channels) per libsndfile read */
#define UPLOAD_MAX_CHANNELS 32

static int too_long(sotto_err *err, double seconds, double max_seconds) {
    return sotto_err_set(err, SOTTO_E_RANGE, "%.0f s of audio, longer than the limit of %.0f s",
                         seconds, max_seconds);
}

/* A growing 16 kHz output buffer of at most `limit` samples. */
typedef struct outbuf {
    float *p;
    size_t n, cap, limit;
} outbuf;

static int outbuf_reserve(outbuf *o, size_t more, sotto_err *err) {
    if (o->n + more <= o->cap) return SOTTO_OK;
    if (o->n + more > o->limit) return sotto_err_set(err, SOTTO_E_INTERNAL, "output bound exceeded");
    size_t cap = o->cap ? o->cap : 1 << 16;
    while (cap < o->n + more) cap *= 2;
    if (cap > o->limit) cap = o->limit;
    float *nb = realloc(o->p, sizeof(float) * cap);
    if (!nb) return sotto_err_set(err, SOTTO_E_NOMEM, "out of memory (%zu samples)", cap);
    o->p = nb;
    o->cap = cap;
    return SOTTO_OK;
}

static int check_info(const SF_INFO *info, double max_seconds, sotto_err *err) {
    if (info->channels < 1 || info->channels > UPLOAD_MAX_CHANNELS ||
        info->samplerate < SOTTO_AUDIO_MIN_RATE || info->samplerate > SOTTO_AUDIO_MAX_RATE)
        return sotto_err_set(err, SOTTO_E_UNSUPPORTED,
                             "unsupported audio: %d channels at %d Hz (1..%d channels, %d..%d Hz)",
                             info->channels, info->samplerate, UPLOAD_MAX_CHANNELS,
                             SOTTO_AUDIO_MIN_RATE, SOTTO_AUDIO_MAX_RATE);
    /* a declared length is checked before anything is decoded (it may be
       unknown, SF_COUNT_MAX, or wrong: the decoding loop checks again) */
    if (info->frames > 0 && info->frames != SF_COUNT_MAX &&
        (double)info->frames > max_seconds * info->samplerate)
        return too_long(err, (double)info->frames / info->samplerate, max_seconds);
    return SOTTO_OK;
}

/* Reads f in chunks: downmix, resample to 16 kHz, append; stops past the cap. */
static int sndfile_pump(SNDFILE *f, const SF_INFO *info, double max_seconds, sotto_resampler *rs,
                        outbuf *o, sotto_err *err) {
    float frames[UPLOAD_CHUNK], mono[UPLOAD_CHUNK];
    sf_count_t per_read = UPLOAD_CHUNK / info->channels;
    double max_frames = max_seconds * info->samplerate;
    uint64_t total = 0;
    int rc = SOTTO_OK;
    for (;;) {
        sf_count_t got = sf_readf_float(f, frames, per_read);
        if (got <= 0) break;
        total += (uint64_t)got;
        if ((double)total > max_frames)
            return too_long(err, (double)total / info->samplerate, max_seconds);
        for (sf_count_t i = 0; i < got; i++) {
            float acc = 0;
            for (int c = 0; c < info->channels; c++) acc += frames[i * info->channels + c];
            mono[i] = isfinite(acc) ? acc / (float)info->channels : 0.0f;
        }
        size_t need = sotto_resampler_max_out(rs, (size_t)got), made = 0;
        if ((rc = outbuf_reserve(o, need, err))) return rc;
        if ((rc = sotto_resampler_process(rs, mono, (size_t)got, o->p + o->n, o->cap - o->n, &made)))
            return sotto_err_set(err, rc, "resampling %d -> 16000 Hz failed", info->samplerate);
        o->n += made;
    }
    if (sf_error(f))
        return sotto_err_set(err, SOTTO_E_FORMAT, "the audio data is corrupt: %s",
                             sf_error_number(sf_error(f)));
    size_t need = sotto_resampler_max_out(rs, 0), made = 0;
    if ((rc = outbuf_reserve(o, need, err))) return rc;
    if ((rc = sotto_resampler_flush(rs, o->p + o->n, o->cap - o->n, &made)))
        return sotto_err_set(err, rc, "resampling %d -> 16000 Hz failed", info->samplerate);
    o->n += made;
    return SOTTO_OK;
}

static int sndfile_decode(const void *data, size_t len, double max_seconds, float **out,
                          size_t *n, sotto_err *err) {
    memfile mf = {data, (sf_count_t)len, 0};
    SF_VIRTUAL_IO io = {mf_len, mf_seek, mf_read, mf_write, mf_tell};
    SF_INFO info;
    memset(&info, 0, sizeof info);
    SNDFILE *f = sf_open_virtual(&io, SFM_READ, &info, &mf);
    if (!f) return sotto_err_set(err, SOTTO_E_FORMAT, "not a WAV file, and libsndfile says: %s", sf_strerror(NULL));
    int rc = check_info(&info, max_seconds, err);
    sotto_resampler *rs = NULL;
    outbuf o = {NULL, 0, 0, 0};
    if (rc == SOTTO_OK) {
        /* everything the cap allows, as 16 kHz samples, plus the filter's slack */
        o.limit = (size_t)(max_seconds * 16000.0) + 64;
        sotto_err e2;
        sotto_err_clear(&e2);
        rs = sotto_resampler_create(info.samplerate, 16000, SOTTO_RESAMPLE_QUALITY_FILE, &e2);
        rc = rs ? sndfile_pump(f, &info, max_seconds, rs, &o, err)
                : sotto_err_set(err, e2.code, "%s", e2.msg);
    }
    sotto_resampler_free(rs);
    sf_close(f);
    if (rc == SOTTO_OK && o.n == 0) rc = sotto_err_set(err, SOTTO_E_FORMAT, "the file holds no audio");
    if (rc != SOTTO_OK) {
        free(o.p);
        return rc;
    }
    *out = o.p;
    *n = o.n;
    return SOTTO_OK;
}

static int wav_decode(const void *data, size_t len, double max_seconds, float **out, size_t *n,
                      sotto_err *err) {
    sotto_audio a;
    int rc = sotto_wav_read_mem_max(data, len, "upload", max_seconds, &a, err);
    if (rc) return rc;
    if (a.n == 0) {
        sotto_audio_free(&a);
        return sotto_err_set(err, SOTTO_E_FORMAT, "the file holds no audio");
    }
    rc = sotto_resample(a.samples, a.n, a.sample_rate, 16000, SOTTO_RESAMPLE_QUALITY_FILE, out, n, err);
    sotto_audio_free(&a);
    if (rc == SOTTO_OK && *n == 0) { /* less than one 16 kHz sample */
        free(*out);
        *out = NULL;
        rc = sotto_err_set(err, SOTTO_E_FORMAT, "the file holds no audio");
    }
    return rc;
}

int srv_decode_upload_max(const void *data, size_t len, double max_seconds, float **out,
                          size_t *n, sotto_err *err) {
    if (!out || !n || (!data && len)) return sotto_err_set(err, SOTTO_E_INVALID, "NULL argument");
    *out = NULL;
    *n = 0;
    if (!(max_seconds > 0)) max_seconds = UPLOAD_DEFAULT_MAX_SECONDS;
    int wav = len >= 12 && !memcmp(data, "RIFF", 4) && !memcmp((const char *)data + 8, "WAVE", 4);
    return wav ? wav_decode(data, len, max_seconds, out, n, err)
               : sndfile_decode(data, len, max_seconds, out, n, err);
}

int srv_decode_upload(const void *data, size_t len, float **out, size_t *n, sotto_err *err) {
    return srv_decode_upload_max(data, len, 0, out, n, err);
}
