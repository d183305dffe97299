/* test_wav.c - WAV reading of every supported variant from hand-built
 * headers, malformed files (every truncation, bad fields, random damage),
 * and the 16-bit writer. Run it under ASan: in-memory cases are parsed from
 * malloc'd buffers of the exact length, so any overread is caught. */
#define _POSIX_C_SOURCE 200809L
#include "audio.h"
#include "check.h"
#include "log.h"

#include <dirent.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char g_dir[256];

typedef struct wbuf {
    unsigned char d[8192];
    size_t len;
} wbuf;

static void put(wbuf *b, const void *p, size_t n) {
    if (b->len + n > sizeof b->d) return;
    memcpy(b->d + b->len, p, n);
    b->len += n;
}
static void put8(wbuf *b, unsigned v) {
    unsigned char c = (unsigned char)v;
    put(b, &c, 1);
}
static void put16(wbuf *b, unsigned v) {
    put8(b, v & 0xFF);
    put8(b, v >> 8 & 0xFF);
}
static void put32(wbuf *b, uint32_t v) {
    put16(b, v & 0xFFFF);
    put16(b, v >> 16);
}

static void riff_begin(wbuf *b) {
    b->len = 0;
    put(b, "RIFF", 4);
    put32(b, 0);
    put(b, "WAVE", 4);
}
static void riff_end(wbuf *b) {
    uint32_t v = (uint32_t)(b->len - 8);
    for (int i = 0; i < 4; i++) b->d[4 + i] = (unsigned char)(v >> (8 * i));
}

/* A chunk with a body; pads odd sizes with one zero byte. */
static void chunk(wbuf *b, const char *id, const void *body, uint32_t size) {
    put(b, id, 4);
    put32(b, size);
    put(b, body, size);
    if (size & 1) put8(b, 0);
}

/* fmt chunk. sub != 0 makes it WAVE_FORMAT_EXTENSIBLE with that sub-format.
 * extra: bytes of cbSize field for plain formats (0 = 16-byte chunk, 2 = 18). */
static void fmt(wbuf *b, unsigned tag, unsigned ch, uint32_t rate, unsigned bits, unsigned sub,
                int extra) {
    unsigned align = ch * bits / 8;
    put(b, "fmt ", 4);
    put32(b, sub ? 40 : (uint32_t)(16 + extra));
    put16(b, sub ? 0xFFFE : tag);
    put16(b, ch);
    put32(b, rate);
    put32(b, rate * align);
    put16(b, align);
    put16(b, bits);
    if (sub) {
        static const unsigned char tail[14] = {0x00, 0x00, 0x00, 0x00, 0x10, 0x00, 0x80,
                                               0x00, 0x00, 0xAA, 0x00, 0x38, 0x9B, 0x71};
        put16(b, 22);
        put16(b, bits);
        put32(b, ch == 2 ? 3 : 0);
        put16(b, sub);
        put(b, tail, sizeof tail);
    } else if (extra) {
        put16(b, 0);
    }
}

static void write_file(const char *name, const wbuf *b, char *path, size_t pathsz) {
    snprintf(path, pathsz, "%s/%s", g_dir, name);
    FILE *fp = fopen(path, "wb");
    CHECK(fp != NULL);
    if (!fp) return;
    CHECK(fwrite(b->d, 1, b->len, fp) == b->len);
    fclose(fp);
}

/* Reads b from a file and from an exact-size heap copy; both must agree. */
static int read_both(const char *name, const wbuf *b, sotto_audio *a, sotto_err *err) {
    char path[512];
    write_file(name, b, path, sizeof path);
    int rc = sotto_wav_read(path, a, err);
    if (rc != SOTTO_OK) CHECK_MSG(strstr(err->msg, name) != NULL, "message \"%s\"", err->msg);
    unsigned char *copy = malloc(b->len ? b->len : 1);
    memcpy(copy, b->d, b->len);
    sotto_audio m = {0};
    int rc2 = sotto_wav_read_mem(copy, b->len, name, &m, err);
    CHECK_EQ_INT(rc2, rc);
    if (rc == SOTTO_OK && rc2 == SOTTO_OK) {
        CHECK(m.n == a->n && m.sample_rate == a->sample_rate);
        CHECK(m.n == a->n && (m.n == 0 || memcmp(m.samples, a->samples, m.n * 4) == 0));
    }
    sotto_audio_free(&m);
    free(copy);
    return rc;
}

static void expect_samples(const char *name, const wbuf *b, int rate, int ch, const float *want,
                           size_t n) {
    sotto_audio a;
    sotto_err err;
    int rc = read_both(name, b, &a, &err);
    CHECK_MSG(rc == SOTTO_OK, "%s: %s", name, err.msg);
    if (rc != SOTTO_OK) return;
    CHECK_EQ_INT(a.n, n);
    CHECK_EQ_INT(a.sample_rate, rate);
    CHECK_EQ_INT(a.channels_in, ch);
    CHECK(a.samples != NULL);
    for (size_t i = 0; i < n && i < a.n; i++)
        CHECK_MSG(a.samples[i] == want[i], "%s[%zu]: %.9g != %.9g", name, i, a.samples[i],
                  want[i]);
    sotto_audio_free(&a);
    CHECK(a.samples == NULL && a.n == 0);
}

static void test_pcm_variants(void) {
    wbuf b;
    /* 8-bit unsigned */
    const unsigned char u8[5] = {0, 128, 255, 1, 64};
    float w8[5];
    for (int i = 0; i < 5; i++) w8[i] = (float)((u8[i] - 128) / 128.0);
    riff_begin(&b);
    fmt(&b, 1, 1, 8000, 8, 0, 0);
    chunk(&b, "data", u8, 5); /* odd size: pad byte follows */
    chunk(&b, "LIST", "abcd", 4);
    riff_end(&b);
    expect_samples("u8.wav", &b, 8000, 1, w8, 5);
    /* 16-bit */
    const int16_t s16[6] = {-32768, -1, 0, 1, 32767, 12345};
    float w16[6];
    unsigned char raw[64];
    for (int i = 0; i < 6; i++) {
        w16[i] = (float)(s16[i] / 32768.0);
        raw[2 * i] = (unsigned char)((uint16_t)s16[i] & 0xFF);
        raw[2 * i + 1] = (unsigned char)((uint16_t)s16[i] >> 8);
    }
    riff_begin(&b);
    fmt(&b, 1, 1, 16000, 16, 0, 2);
    chunk(&b, "data", raw, 12);
    riff_end(&b);
    expect_samples("s16.wav", &b, 16000, 1, w16, 6);
    /* 24-bit */
    const int32_t s24[5] = {-8388608, 8388607, -1, 0x123456, -0x123456};
    float w24[5];
    for (int i = 0; i < 5; i++) {
        w24[i] = (float)(s24[i] / 8388608.0);
        uint32_t u = (uint32_t)s24[i];
        for (int k = 0; k < 3; k++) raw[3 * i + k] = (unsigned char)(u >> (8 * k));
    }
    riff_begin(&b);
    fmt(&b, 1, 1, 44100, 24, 0, 0);
    chunk(&b, "data", raw, 15);
    riff_end(&b);
    expect_samples("s24.wav", &b, 44100, 1, w24, 5);
    /* 32-bit */
    const int32_t s32[4] = {INT32_MIN, INT32_MAX, -1, 123456789};
    float w32[4];
    for (int i = 0; i < 4; i++) {
        w32[i] = (float)(s32[i] / 2147483648.0);
        uint32_t u = (uint32_t)s32[i];
        for (int k = 0; k < 4; k++) raw[4 * i + k] = (unsigned char)(u >> (8 * k));
    }
    riff_begin(&b);
    fmt(&b, 1, 1, 48000, 32, 0, 0);
    chunk(&b, "data", raw, 16);
    riff_end(&b);
    expect_samples("s32.wav", &b, 48000, 1, w32, 4);
}

static void test_float_variants(void) {
    wbuf b;
    unsigned char raw[64];
    const float f32[4] = {0.25f, -1.5f, 1e-30f, 0.0f};
    for (int i = 0; i < 4; i++) {
        uint32_t u;
        memcpy(&u, &f32[i], 4);
        for (int k = 0; k < 4; k++) raw[4 * i + k] = (unsigned char)(u >> (8 * k));
    }
    riff_begin(&b);
    fmt(&b, 3, 1, 22050, 32, 0, 2);
    chunk(&b, "fact", "\x04\0\0\0", 4);
    chunk(&b, "data", raw, 16);
    riff_end(&b);
    expect_samples("f32.wav", &b, 22050, 1, f32, 4);
    /* Extensible float32, same data */
    riff_begin(&b);
    fmt(&b, 0, 1, 22050, 32, 3, 0);
    chunk(&b, "data", raw, 16);
    riff_end(&b);
    expect_samples("ext_f32.wav", &b, 22050, 1, f32, 4);
    const double f64[3] = {0.1, -0.75, 3.0};
    float w64[3];
    for (int i = 0; i < 3; i++) {
        uint64_t u;
        memcpy(&u, &f64[i], 8);
        for (int k = 0; k < 8; k++) raw[8 * i + k] = (unsigned char)(u >> (8 * k));
        w64[i] = (float)f64[i];
    }
    riff_begin(&b);
    fmt(&b, 3, 1, 16000, 64, 0, 0);
    chunk(&b, "data", raw, 24);
    riff_end(&b);
    expect_samples("f64.wav", &b, 16000, 1, w64, 3);
}

/* Interleaved 16-bit frames of `ch` channels, expected average per frame. */
static void test_multichannel(void) {
    const int chans[2] = {2, 6};
    for (int c = 0; c < 2; c++) {
        int ch = chans[c];
        const int frames = 7;
        unsigned char raw[7 * 6 * 2];
        float want[7];
        for (int f = 0; f < frames; f++) {
            double acc = 0.0;
            for (int k = 0; k < ch; k++) {
                int v = (f * 4099 + k * 12007) % 65536 - 32768;
                raw[2 * (f * ch + k)] = (unsigned char)((uint16_t)v & 0xFF);
                raw[2 * (f * ch + k) + 1] = (unsigned char)((uint16_t)v >> 8);
                acc += v / 32768.0;
            }
            want[f] = (float)(acc / ch);
        }
        wbuf b;
        riff_begin(&b);
        chunk(&b, "JUNK", "xyz", 3); /* odd, unknown, before fmt */
        fmt(&b, 1, (unsigned)ch, 16000, 16, 0, 0);
        chunk(&b, "data", raw, (uint32_t)(frames * ch * 2));
        riff_end(&b);
        expect_samples(ch == 2 ? "stereo.wav" : "6ch.wav", &b, 16000, ch, want, frames);
        /* Same as WAVE_FORMAT_EXTENSIBLE PCM, with data before fmt. */
        riff_begin(&b);
        chunk(&b, "data", raw, (uint32_t)(frames * ch * 2));
        fmt(&b, 0, (unsigned)ch, 16000, 16, 1, 0);
        chunk(&b, "bext", "q", 1);
        riff_end(&b);
        expect_samples(ch == 2 ? "ext_stereo.wav" : "ext_6ch.wav", &b, 16000, ch, want, frames);
    }
}

static void test_lenient(void) {
    wbuf b;
    const unsigned char raw[10] = {1, 0, 2, 0, 3, 0, 4, 0, 5, 0};
    float want[5];
    for (int i = 0; i < 5; i++) want[i] = (float)((i + 1) / 32768.0);
    /* data size past the end of the file: the whole frames present */
    riff_begin(&b);
    fmt(&b, 1, 1, 16000, 16, 0, 0);
    put(&b, "data", 4);
    put32(&b, 1000);
    put(&b, raw, 10);
    riff_end(&b);
    expect_samples("past_eof.wav", &b, 16000, 1, want, 5);
    b.d[b.len - 11] = 0xFF; /* data size 0xFF0003E8 */
    expect_samples("past_eof2.wav", &b, 16000, 1, want, 5);
    put8(&b, 6); /* a half frame at the end */
    expect_samples("past_eof3.wav", &b, 16000, 1, want, 5);
    /* zero-length data */
    riff_begin(&b);
    fmt(&b, 1, 1, 16000, 16, 0, 0);
    chunk(&b, "data", raw, 0);
    riff_end(&b);
    expect_samples("empty_data.wav", &b, 16000, 1, want, 0);
    /* partial frame inside a correctly sized chunk; an odd last chunk without
     * its pad byte; a RIFF size field that is wrong */
    riff_begin(&b);
    fmt(&b, 1, 1, 16000, 16, 0, 0);
    chunk(&b, "data", raw, 9);
    put(&b, "note", 4);
    put32(&b, 3);
    put(&b, "abc", 3);
    b.d[4] = 0x12;
    expect_samples("partial.wav", &b, 16000, 1, want, 4);
}

static void expect_fail(const char *name, const wbuf *b, int code) {
    sotto_audio a;
    sotto_err err;
    int rc = read_both(name, b, &a, &err);
    CHECK_MSG(rc == code, "%s: rc %d (want %d): %s", name, rc, code, err.msg);
    if (rc == SOTTO_OK) sotto_audio_free(&a);
    else CHECK(a.samples == NULL && err.code == rc);
}

static void base_file(wbuf *b, int ext) {
    const unsigned char raw[8] = {1, 0, 2, 0, 3, 0, 4, 0};
    riff_begin(b);
    fmt(b, 1, 1, 16000, 16, ext ? 1 : 0, 0);
    chunk(b, "data", raw, 8);
    riff_end(b);
}

static void test_malformed(void) {
    wbuf b;
    base_file(&b, 0);
    memcpy(b.d, "RIFX", 4);
    expect_fail("rifx.wav", &b, SOTTO_E_UNSUPPORTED);
    memcpy(b.d, "RF64", 4);
    expect_fail("rf64.wav", &b, SOTTO_E_UNSUPPORTED);
    memcpy(b.d, "JUNK", 4);
    expect_fail("badid.wav", &b, SOTTO_E_FORMAT);
    base_file(&b, 0);
    memcpy(b.d + 8, "AVI ", 4);
    expect_fail("notwave.wav", &b, SOTTO_E_FORMAT);
    /* missing fmt / data */
    riff_begin(&b);
    chunk(&b, "data", "\1\0\2\0", 4);
    riff_end(&b);
    expect_fail("nofmt.wav", &b, SOTTO_E_FORMAT);
    riff_begin(&b);
    fmt(&b, 1, 1, 16000, 16, 0, 0);
    chunk(&b, "LIST", "abcd", 4);
    riff_end(&b);
    expect_fail("nodata.wav", &b, SOTTO_E_FORMAT);
    /* field damage at known offsets of the 44-byte base file */
    struct {
        const char *name;
        size_t off;
        int width;
        uint32_t v;
        int code;
    } cases[] = {
        {"zero_ch.wav", 22, 2, 0, SOTTO_E_FORMAT},
        {"zero_rate.wav", 24, 4, 0, SOTTO_E_FORMAT},
        {"align.wav", 32, 2, 4, SOTTO_E_FORMAT},
        {"adpcm.wav", 20, 2, 2, SOTTO_E_UNSUPPORTED},
        {"mulaw.wav", 20, 2, 7, SOTTO_E_UNSUPPORTED},
        {"bits12.wav", 34, 2, 12, SOTTO_E_UNSUPPORTED},
        {"bits0.wav", 34, 2, 0, SOTTO_E_UNSUPPORTED},
        {"ch33.wav", 22, 2, 33, SOTTO_E_UNSUPPORTED},
        {"rate_hi.wav", 24, 4, 384001, SOTTO_E_UNSUPPORTED},
        {"rate_1hz.wav", 24, 4, 1, SOTTO_E_UNSUPPORTED},
        {"rate_7999.wav", 24, 4, 7999, SOTTO_E_UNSUPPORTED},
        {"fmt_short.wav", 16, 4, 14, SOTTO_E_FORMAT},
        {"fmt_long.wav", 16, 4, 1000, SOTTO_E_FORMAT},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        base_file(&b, 0);
        for (int k = 0; k < cases[i].width; k++)
            b.d[cases[i].off + (size_t)k] = (unsigned char)(cases[i].v >> (8 * k));
        expect_fail(cases[i].name, &b, cases[i].code);
    }
    base_file(&b, 0);
    b.d[32] = 4; /* block align 4 with 2 channels x 16 bits is fine ... */
    b.d[22] = 2;
    expect_fail("stereo_ok.wav", &b, SOTTO_OK);
    base_file(&b, 1);
    b.d[44] = 0x02; /* extensible with the ADPCM sub-format GUID */
    expect_fail("ext_adpcm.wav", &b, SOTTO_E_UNSUPPORTED);
    base_file(&b, 1);
    b.d[50] = 0x11; /* a GUID that is not KSDATAFORMAT_SUBTYPE_* */
    expect_fail("ext_guid.wav", &b, SOTTO_E_UNSUPPORTED);
    base_file(&b, 1);
    b.d[16] = 18; /* extensible in an 18-byte fmt chunk */
    expect_fail("ext_short.wav", &b, SOTTO_E_FORMAT);
    base_file(&b, 0);
    b.d[35] = 0; /* float tag with 16-bit samples */
    b.d[20] = 3;
    expect_fail("f16.wav", &b, SOTTO_E_UNSUPPORTED);
    sotto_audio a;
    sotto_err err;
    char path[512];
    snprintf(path, sizeof path, "%s/does_not_exist.wav", g_dir);
    CHECK_EQ_INT(sotto_wav_read(path, &a, &err), SOTTO_E_NOTFOUND);
    b.len = 0;
    expect_fail("empty.wav", &b, SOTTO_E_FORMAT);
}

/* The bounds on rate and duration: a 144-byte file declaring 1 Hz (which
 * would resample to 16000 output samples per input byte) is refused, and a
 * file longer than the duration cap is refused before its samples are
 * allocated, at exactly the cap. */
static void test_bounds(void) {
    static unsigned char raw[2 * 8001];
    wbuf b;
    riff_begin(&b);
    fmt(&b, 1, 1, 1, 16, 0, 0);
    chunk(&b, "data", raw, 100);
    riff_end(&b);
    CHECK_EQ_INT(b.len, 144);
    sotto_audio a;
    sotto_err err;
    CHECK_EQ_INT(read_both("one_hz.wav", &b, &a, &err), SOTTO_E_UNSUPPORTED);
    CHECK_MSG(strstr(err.msg, "8000..384000") != NULL, "%s", err.msg);
    for (int n = 8000; n <= 8001; n++) {
        riff_begin(&b);
        fmt(&b, 1, 1, 8000, 8, 0, 0);
        chunk(&b, "data", raw, (uint32_t)n); /* 8-bit: n frames, n / 8000 s */
        riff_end(&b);
        int rc = sotto_wav_read_mem_max(b.d, b.len, "cap.wav", 1.0, &a, &err);
        CHECK_EQ_INT(rc, n == 8000 ? SOTTO_OK : SOTTO_E_RANGE);
        if (rc == SOTTO_OK) {
            CHECK_EQ_INT(a.n, 8000);
            sotto_audio_free(&a);
        } else {
            CHECK(a.samples == NULL && strstr(err.msg, "limit of 1 s") != NULL);
        }
    }
    /* without a cap the default applies: the same file reads whole */
    CHECK_EQ_INT(sotto_wav_read_mem_max(b.d, b.len, "cap.wav", 0, &a, &err), SOTTO_OK);
    CHECK_EQ_INT(a.n, 8001);
    sotto_audio_free(&a);
    /* a data chunk that declares 4 GB but holds 16 bytes allocates for 16 */
    riff_begin(&b);
    fmt(&b, 1, 1, 8000, 16, 0, 0);
    put(&b, "data", 4);
    put32(&b, 0xFFFFFFFFu);
    put(&b, raw, 16);
    CHECK_EQ_INT(sotto_wav_read_mem_max(b.d, b.len, "liar.wav", 1.0, &a, &err), SOTTO_OK);
    CHECK_EQ_INT(a.n, 8);
    sotto_audio_free(&a);
}

/* Every prefix of small files: < 44 (or 68) bytes fails, longer ones give
 * the whole frames present. */
static void test_truncation(void) {
    for (int ext = 0; ext < 2; ext++) {
        wbuf b, t;
        base_file(&b, ext);
        size_t hdr = ext ? 68 : 44;
        CHECK_EQ_INT(b.len, hdr + 8);
        for (size_t k = 0; k < b.len; k++) {
            t = b;
            t.len = k;
            sotto_audio a;
            sotto_err err;
            char name[64];
            snprintf(name, sizeof name, "trunc%d_%zu.wav", ext, k);
            int rc = read_both(name, &t, &a, &err);
            if (k < hdr) {
                CHECK_MSG(rc == SOTTO_E_FORMAT, "%s: rc %d", name, rc);
            } else {
                CHECK_MSG(rc == SOTTO_OK, "%s: %s", name, err.msg);
                if (rc == SOTTO_OK) CHECK_EQ_INT(a.n, (k - hdr) / 2);
                sotto_audio_free(&a);
            }
        }
    }
}

/* Random damage to headers and lengths: any result, but no crash/overread. */
static void test_fuzz(void) {
    uint32_t s = 12345;
    int ok = 0, failed = 0;
    for (int it = 0; it < 3000; it++) {
        wbuf b;
        base_file(&b, it % 3 == 0);
        if (it % 5 == 0) chunk(&b, "LIST", "zz", 2);
        int flips = 1 + (int)((s >> 4) % 4);
        for (int f = 0; f < flips; f++) {
            s = s * 1664525u + 1013904223u;
            b.d[(s >> 8) % b.len] = (unsigned char)(s >> 24);
        }
        s = s * 1664525u + 1013904223u;
        if (s & 1) b.len = (s >> 8) % (b.len + 1);
        unsigned char *copy = malloc(b.len ? b.len : 1);
        memcpy(copy, b.d, b.len);
        sotto_audio a;
        sotto_err err;
        int rc = sotto_wav_read_mem(copy, b.len, "fuzz", &a, &err);
        if (rc == SOTTO_OK) {
            ok++;
            CHECK(a.samples != NULL && a.channels_in >= 1 && a.sample_rate >= 8000 &&
                  a.sample_rate <= 384000);
            sotto_audio_free(&a);
        } else {
            failed++;
            CHECK(rc < 0 && a.samples == NULL && strstr(err.msg, "fuzz") != NULL);
        }
        free(copy);
    }
    CHECK(ok > 0 && failed > 0);
}

static void test_write(void) {
    float x[12];
    for (int i = 0; i < 8; i++) x[i] = (float)((i * 9000 - 32768) / 32768.0);
    x[8] = 1.5f;   /* clipped to 32767 */
    x[9] = -2.0f;  /* clipped to -32768 */
    x[10] = NAN;   /* written as 0 */
    x[11] = 1e-6f; /* rounds to 0 */
    char path[512];
    snprintf(path, sizeof path, "%s/out.wav", g_dir);
    sotto_err err;
    CHECK_EQ_INT(sotto_wav_write_s16(path, x, 12, 16000, &err), SOTTO_OK);
    sotto_audio a;
    CHECK_EQ_INT(sotto_wav_read(path, &a, &err), SOTTO_OK);
    CHECK_EQ_INT(a.n, 12);
    CHECK_EQ_INT(a.sample_rate, 16000);
    for (int i = 0; i < 8 && a.n == 12; i++) CHECK(a.samples[i] == x[i]);
    if (a.n == 12) {
        CHECK(a.samples[8] == 32767.0f / 32768.0f);
        CHECK(a.samples[9] == -1.0f);
        CHECK(a.samples[10] == 0.0f && a.samples[11] == 0.0f);
    }
    sotto_audio_free(&a);
    FILE *fp = fopen(path, "rb");
    unsigned char hdr[44];
    CHECK(fp && fread(hdr, 1, 44, fp) == 44 && fgetc(fp) != EOF);
    if (fp) {
        fseek(fp, 0, SEEK_END);
        CHECK_EQ_INT(ftell(fp), 44 + 24);
        fclose(fp);
    }
    CHECK(memcmp(hdr, "RIFF", 4) == 0 && memcmp(hdr + 8, "WAVEfmt ", 8) == 0 &&
          memcmp(hdr + 36, "data", 4) == 0 && hdr[40] == 24 && hdr[4] == 60);
    /* load_16k: a 16 kHz file unchanged, an 8 kHz file resampled to 2x. */
    CHECK_EQ_INT(sotto_audio_load_16k(path, &a, &err), SOTTO_OK);
    CHECK(a.n == 12 && a.sample_rate == 16000);
    sotto_audio_free(&a);
    float y[800];
    for (int i = 0; i < 800; i++) y[i] = (float)(0.5 * sin(0.3 * i));
    CHECK_EQ_INT(sotto_wav_write_s16(path, y, 800, 8000, &err), SOTTO_OK);
    CHECK_EQ_INT(sotto_audio_load_16k(path, &a, &err), SOTTO_OK);
    CHECK(a.n == 1600 && a.sample_rate == 16000 && a.channels_in == 1);
    sotto_audio_free(&a);
    CHECK_EQ_INT(sotto_wav_write_s16(path, NULL, 0, 16000, &err), SOTTO_OK);
    CHECK_EQ_INT(sotto_wav_read(path, &a, &err), SOTTO_OK);
    CHECK(a.n == 0);
    sotto_audio_free(&a);
    unlink(path);
    CHECK_EQ_INT(sotto_wav_write_s16(path, x, 12, 0, &err), SOTTO_E_INVALID);
    snprintf(path, sizeof path, "%s/no/such/dir.wav", g_dir);
    CHECK_EQ_INT(sotto_wav_write_s16(path, x, 12, 16000, &err), SOTTO_E_IO);
    sotto_audio_free(NULL);
}

/* Removes the files in the test's own temporary directory, then the directory. */
static void cleanup_dir(void) {
    DIR *dir = opendir(g_dir);
    if (!dir) return;
    struct dirent *e;
    char path[600];
    while ((e = readdir(dir)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        snprintf(path, sizeof path, "%s/%s", g_dir, e->d_name);
        unlink(path);
    }
    closedir(dir);
    if (rmdir(g_dir) != 0) fprintf(stderr, "could not remove %s\n", g_dir);
}

int main(void) {
    snprintf(g_dir, sizeof g_dir, "/tmp/sotto_wav_XXXXXX");
    if (!mkdtemp(g_dir)) {
        perror("mkdtemp");
        return 1;
    }
    test_pcm_variants();
    test_float_variants();
    test_multichannel();
    sotto_log_set_level(SOTTO_LOG_ERROR); /* the rest warns by design */
    test_lenient();
    test_malformed();
    test_truncation();
    test_bounds();
    test_fuzz();
    test_write();
    cleanup_dir();
    return check_report();
}
