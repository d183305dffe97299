/* wav.c - RIFF/WAVE reading (bounds-checked, chunks in any order) and
 * 16-bit writing; loading any WAV as 16 kHz mono (see audio.h). */
#define _POSIX_C_SOURCE 200809L
#include "audio.h"

#include "log.h"
#include "mapfile.h"
#include "resample.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WAV_TAG_PCM 0x0001
#define WAV_TAG_FLOAT 0x0003
#define WAV_TAG_EXTENSIBLE 0xFFFE
#define WAV_MIN_RATE SOTTO_AUDIO_MIN_RATE
#define WAV_MAX_RATE SOTTO_AUDIO_MAX_RATE
#define WAV_MAX_CHANNELS 32

typedef struct wav_fmt {
    int tag; /* WAV_TAG_PCM or WAV_TAG_FLOAT (extensible resolved) */
    int channels;
    int rate;
    int bits; /* container bits per sample */
    int block_align;
} wav_fmt;

typedef struct wav_layout {
    int have_fmt, have_data, data_truncated;
    size_t data_off, data_len;  /* data_len: bytes present in the buffer */
    uint64_t data_declared;     /* size field of the data chunk */
} wav_layout;

/* KSDATAFORMAT_SUBTYPE_* GUIDs end in these 14 bytes after the 16-bit tag. */
static const unsigned char wav_guid_tail[14] = {0x00, 0x00, 0x00, 0x00, 0x10, 0x00, 0x80,
                                                0x00, 0x00, 0xAA, 0x00, 0x38, 0x9B, 0x71};

static uint32_t rd16(const unsigned char *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8; }

static uint32_t rd32(const unsigned char *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void wr16(unsigned char *p, uint32_t v) {
    p[0] = (unsigned char)(v & 0xFF);
    p[1] = (unsigned char)(v >> 8 & 0xFF);
}

static void wr32(unsigned char *p, uint32_t v) {
    wr16(p, v & 0xFFFF);
    wr16(p + 2, v >> 16);
}

void sotto_audio_free(sotto_audio *a) {
    if (!a) return;
    free(a->samples);
    memset(a, 0, sizeof *a);
}

static int parse_fmt(const unsigned char *p, size_t size, const char *name, wav_fmt *f,
                     sotto_err *err) {
    if (size < 16)
        return sotto_err_set(err, SOTTO_E_FORMAT, "%s: fmt chunk too short (%zu bytes, need 16)",
                             name, size);
    int tag = (int)rd16(p);
    f->channels = (int)rd16(p + 2);
    uint32_t rate = rd32(p + 4);
    f->block_align = (int)rd16(p + 12);
    f->bits = (int)rd16(p + 14);
    if (f->channels == 0) return sotto_err_set(err, SOTTO_E_FORMAT, "%s: zero channels", name);
    if (rate == 0) return sotto_err_set(err, SOTTO_E_FORMAT, "%s: zero sample rate", name);
    if (f->channels > WAV_MAX_CHANNELS)
        return sotto_err_set(err, SOTTO_E_UNSUPPORTED, "%s: %d channels (at most %d supported)",
                             name, f->channels, WAV_MAX_CHANNELS);
    if (rate < WAV_MIN_RATE || rate > WAV_MAX_RATE)
        return sotto_err_set(err, SOTTO_E_UNSUPPORTED,
                             "%s: sample rate %u Hz outside the supported %d..%d Hz", name,
                             (unsigned)rate, WAV_MIN_RATE, WAV_MAX_RATE);
    f->rate = (int)rate;
    if (tag == WAV_TAG_EXTENSIBLE) {
        if (size < 40)
            return sotto_err_set(err, SOTTO_E_FORMAT,
                                 "%s: WAVE_FORMAT_EXTENSIBLE fmt chunk too short (%zu bytes, "
                                 "need 40)",
                                 name, size);
        tag = (int)rd16(p + 24);
        if (memcmp(p + 26, wav_guid_tail, sizeof wav_guid_tail) != 0 ||
            (tag != WAV_TAG_PCM && tag != WAV_TAG_FLOAT))
            return sotto_err_set(err, SOTTO_E_UNSUPPORTED,
                                 "%s: WAVE_FORMAT_EXTENSIBLE sub-format is neither PCM nor "
                                 "IEEE float",
                                 name);
    }
    if (tag != WAV_TAG_PCM && tag != WAV_TAG_FLOAT)
        return sotto_err_set(err, SOTTO_E_UNSUPPORTED,
                             "%s: unsupported format tag 0x%04X (only PCM and IEEE float)", name,
                             (unsigned)tag);
    f->tag = tag;
    int ok = tag == WAV_TAG_PCM ? (f->bits == 8 || f->bits == 16 || f->bits == 24 || f->bits == 32)
                                : (f->bits == 32 || f->bits == 64);
    if (!ok)
        return sotto_err_set(err, SOTTO_E_UNSUPPORTED, "%s: unsupported %d-bit %s samples", name,
                             f->bits, tag == WAV_TAG_PCM ? "PCM" : "float");
    if (f->block_align != f->channels * f->bits / 8)
        return sotto_err_set(err, SOTTO_E_FORMAT,
                             "%s: block align %d does not match %d channels x %d bits", name,
                             f->block_align, f->channels, f->bits);
    return SOTTO_OK;
}

static int check_riff(const unsigned char *d, size_t len, const char *name, sotto_err *err) {
    if (len < 12)
        return sotto_err_set(err, SOTTO_E_FORMAT, "%s: too short for a RIFF header (%zu bytes)",
                             name, len);
    if (memcmp(d, "RF64", 4) == 0)
        return sotto_err_set(err, SOTTO_E_UNSUPPORTED, "%s: RF64 (64-bit WAV) is not supported",
                             name);
    if (memcmp(d, "RIFX", 4) == 0)
        return sotto_err_set(err, SOTTO_E_UNSUPPORTED,
                             "%s: big-endian RIFX WAV is not supported", name);
    if (memcmp(d, "RIFF", 4) != 0)
        return sotto_err_set(err, SOTTO_E_FORMAT, "%s: not a RIFF file (no \"RIFF\" id)", name);
    if (memcmp(d + 8, "WAVE", 4) != 0)
        return sotto_err_set(err, SOTTO_E_FORMAT, "%s: RIFF file is not WAVE", name);
    return SOTTO_OK;
}

/* Walks the chunks after the RIFF header; parses fmt, locates data. A chunk
 * that runs past the end stops the walk (data is then truncated). */
static int scan_chunks(const unsigned char *d, size_t len, const char *name, wav_fmt *f,
                       wav_layout *lay, sotto_err *err) {
    size_t off = 12;
    while (len - off >= 8) {
        const unsigned char *id = d + off;
        uint32_t size = rd32(d + off + 4);
        size_t body = off + 8, avail = len - body;
        int past_end = (uint64_t)size > (uint64_t)avail;
        if (memcmp(id, "fmt ", 4) == 0 && !lay->have_fmt) {
            if (past_end)
                return sotto_err_set(err, SOTTO_E_FORMAT,
                                     "%s: fmt chunk truncated (%u bytes declared, %zu present)",
                                     name, (unsigned)size, avail);
            int rc = parse_fmt(d + body, size, name, f, err);
            if (rc != SOTTO_OK) return rc;
            lay->have_fmt = 1;
        } else if (memcmp(id, "data", 4) == 0 && !lay->have_data) {
            lay->have_data = 1;
            lay->data_off = body;
            lay->data_declared = size;
            lay->data_len = past_end ? avail : size;
            lay->data_truncated = past_end;
        }
        if (past_end) {
            if (memcmp(id, "data", 4) != 0)
                sotto_log(SOTTO_LOG_WARN, 0, "%s: chunk \"%c%c%c%c\" runs past the end of the file",
                          name, id[0] >= 32 && id[0] < 127 ? id[0] : '?',
                          id[1] >= 32 && id[1] < 127 ? id[1] : '?',
                          id[2] >= 32 && id[2] < 127 ? id[2] : '?',
                          id[3] >= 32 && id[3] < 127 ? id[3] : '?');
            break;
        }
        size_t adv = (size_t)size + (size & 1u);
        if (adv >= avail) break; /* last chunk (a missing pad byte is tolerated) */
        off = body + adv;
    }
    if (!lay->have_fmt) return sotto_err_set(err, SOTTO_E_FORMAT, "%s: no fmt chunk", name);
    if (!lay->have_data) return sotto_err_set(err, SOTTO_E_FORMAT, "%s: no data chunk", name);
    return SOTTO_OK;
}

/* One sample as a double in [-1, 1) (floats are passed through). */
static double wav_sample(const unsigned char *p, const wav_fmt *f) {
    if (f->tag == WAV_TAG_FLOAT) {
        if (f->bits == 32) {
            uint32_t u = rd32(p);
            float v;
            memcpy(&v, &u, sizeof v);
            return v;
        }
        uint64_t u = (uint64_t)rd32(p) | (uint64_t)rd32(p + 4) << 32;
        double v;
        memcpy(&v, &u, sizeof v);
        return v;
    }
    switch (f->bits) {
    case 8: return ((int)p[0] - 128) / 128.0;
    case 16: return ((int32_t)rd16(p) - ((p[1] & 0x80) ? 65536 : 0)) / 32768.0;
    case 24: {
        int32_t v = (int32_t)(p[0] | p[1] << 8 | p[2] << 16);
        if (v & 0x800000) v -= 0x1000000;
        return v / 8388608.0;
    }
    default: {
        int64_t v = (int64_t)rd32(p);
        if (v & 0x80000000LL) v -= 0x100000000LL;
        return (double)v / 2147483648.0;
    }
    }
}

/* Decodes and downmixes `frames` frames; returns the count of non-finite
 * samples replaced by 0. */
static size_t decode(const unsigned char *src, size_t frames, const wav_fmt *f, float *dst) {
    size_t bad = 0, bps = (size_t)f->bits / 8;
    for (size_t i = 0; i < frames; i++) {
        const unsigned char *p = src + i * (size_t)f->block_align;
        double acc = 0.0;
        for (int c = 0; c < f->channels; c++) {
            double v = wav_sample(p + (size_t)c * bps, f);
            if (!isfinite(v)) {
                v = 0.0;
                bad++;
            }
            acc += v;
        }
        dst[i] = (float)(f->channels == 1 ? acc : acc / f->channels);
    }
    return bad;
}

int sotto_wav_read_mem(const void *data, size_t len, const char *name, sotto_audio *out,
                       sotto_err *err) {
    return sotto_wav_read_mem_max(data, len, name, 0, out, err);
}

int sotto_wav_read_mem_max(const void *data, size_t len, const char *name, double max_seconds,
                           sotto_audio *out, sotto_err *err) {
    if (!name) name = "<memory>";
    if (!(max_seconds > 0)) max_seconds = SOTTO_AUDIO_MAX_SECONDS;
    if (!out) return sotto_err_set(err, SOTTO_E_INVALID, "%s: NULL output", name);
    memset(out, 0, sizeof *out);
    if (!data && len > 0) return sotto_err_set(err, SOTTO_E_INVALID, "%s: NULL data", name);
    const unsigned char *d = data;
    int rc = check_riff(d, len, name, err);
    if (rc != SOTTO_OK) return rc;
    wav_fmt f;
    wav_layout lay;
    memset(&f, 0, sizeof f);
    memset(&lay, 0, sizeof lay);
    rc = scan_chunks(d, len, name, &f, &lay, err);
    if (rc != SOTTO_OK) return rc;
    size_t frames = lay.data_len / (size_t)f.block_align;
    if (lay.data_truncated)
        sotto_log(SOTTO_LOG_WARN, 0,
                  "%s: data chunk declares %llu bytes but only %zu are present; using %zu frames",
                  name, (unsigned long long)lay.data_declared, lay.data_len, frames);
    else if (lay.data_len % (size_t)f.block_align != 0)
        sotto_log(SOTTO_LOG_WARN, 0, "%s: data chunk ends with a partial frame (%zu bytes dropped)",
                  name, lay.data_len % (size_t)f.block_align);
    if ((double)frames > max_seconds * f.rate)
        return sotto_err_set(err, SOTTO_E_RANGE,
                             "%s: %.0f s of audio, longer than the limit of %.0f s", name,
                             (double)frames / f.rate, max_seconds);
    out->samples = malloc((frames ? frames : 1) * sizeof *out->samples);
    if (!out->samples)
        return sotto_err_set(err, SOTTO_E_NOMEM, "%s: out of memory (%zu frames)", name, frames);
    size_t bad = decode(d + lay.data_off, frames, &f, out->samples);
    if (bad)
        sotto_log(SOTTO_LOG_WARN, 0, "%s: %zu NaN/Inf samples replaced by 0", name, bad);
    out->n = frames;
    out->sample_rate = f.rate;
    out->channels_in = f.channels;
    return SOTTO_OK;
}

int sotto_wav_read(const char *path, sotto_audio *out, sotto_err *err) {
    if (!path || !out) return sotto_err_set(err, SOTTO_E_INVALID, "wav: NULL argument");
    memset(out, 0, sizeof *out);
    sotto_mapfile mf;
    int rc = sotto_mapfile_open(path, &mf, err);
    if (rc != SOTTO_OK) return rc;
    rc = sotto_wav_read_mem(mf.data, mf.size, path, out, err);
    sotto_mapfile_close(&mf);
    return rc;
}

static int16_t to_s16(float x) {
    if (!(x == x)) return 0; /* NaN */
    double v = floor((double)x * 32768.0 + 0.5);
    if (v > 32767.0) v = 32767.0;
    if (v < -32768.0) v = -32768.0;
    return (int16_t)v;
}

int sotto_wav_write_s16(const char *path, const float *samples, size_t n, int sample_rate,
                        sotto_err *err) {
    if (!path || (n > 0 && !samples))
        return sotto_err_set(err, SOTTO_E_INVALID, "wav: NULL argument");
    if (sample_rate < 1 || sample_rate > WAV_MAX_RATE)
        return sotto_err_set(err, SOTTO_E_INVALID, "%s: sample rate %d out of range 1..%d", path,
                             sample_rate, WAV_MAX_RATE);
    if (n > (0xFFFFFFFFu - 36u) / 2u)
        return sotto_err_set(err, SOTTO_E_RANGE, "%s: %zu samples do not fit a WAV file", path, n);
    unsigned char hdr[44], buf[8192];
    uint32_t data_bytes = (uint32_t)(n * 2);
    memcpy(hdr, "RIFF", 4);
    wr32(hdr + 4, 36u + data_bytes);
    memcpy(hdr + 8, "WAVEfmt ", 8);
    wr32(hdr + 16, 16);
    wr16(hdr + 20, WAV_TAG_PCM);
    wr16(hdr + 22, 1);
    wr32(hdr + 24, (uint32_t)sample_rate);
    wr32(hdr + 28, (uint32_t)sample_rate * 2u);
    wr16(hdr + 32, 2);
    wr16(hdr + 34, 16);
    memcpy(hdr + 36, "data", 4);
    wr32(hdr + 40, data_bytes);
    FILE *fp = fopen(path, "wb");
    if (!fp) return sotto_err_set(err, SOTTO_E_IO, "%s: cannot create", path);
    int ok = fwrite(hdr, 1, sizeof hdr, fp) == sizeof hdr;
    for (size_t i = 0; ok && i < n;) {
        size_t k = 0;
        for (; k < sizeof buf / 2 && i < n; k++, i++)
            wr16(buf + 2 * k, (uint16_t)to_s16(samples[i]));
        ok = fwrite(buf, 2, k, fp) == k;
    }
    if (fclose(fp) != 0) ok = 0;
    if (!ok) {
        remove(path);
        return sotto_err_set(err, SOTTO_E_IO, "%s: write failed", path);
    }
    return SOTTO_OK;
}

int sotto_audio_load_16k(const char *path, sotto_audio *out, sotto_err *err) {
    int rc = sotto_wav_read(path, out, err);
    if (rc != SOTTO_OK || out->sample_rate == 16000) return rc;
    float *res = NULL;
    size_t n_res = 0;
    sotto_err e2;
    sotto_err_clear(&e2);
    rc = sotto_resample(out->samples, out->n, out->sample_rate, 16000,
                        SOTTO_RESAMPLE_QUALITY_FILE, &res, &n_res, &e2);
    if (rc != SOTTO_OK) {
        sotto_audio_free(out);
        return sotto_err_set(err, rc, "%s: %s", path, e2.msg);
    }
    free(out->samples);
    out->samples = res;
    out->n = n_res;
    out->sample_rate = 16000;
    return SOTTO_OK;
}
