/* test_silero.c - the Silero VAD network (include/silero.h) and the SILERO kind
 * of sotto_vad: loading and refusing damaged files (truncated, a tensor
 * renamed, reshaped or retyped, a NaN weight, another format), the
 * probabilities on digital silence, low white noise and speech (jfk.wav),
 * reset and shared-model determinism, and the endpointer on jfk.wav padded
 * with silence and on white noise.
 *
 * Model: $SOTTO_SOURCE_DIR/models/silero_vad/silero_vad.safetensors (else
 * ./models/...), made by scripts/fetch_silero.sh; speech: jfk.wav from
 * $SOTTO_AUDIO_DIR, else $SOTTO_SOURCE_DIR/../shared/audio. A missing file
 * is a failure, not a skip. Temporary files go under /tmp and are removed.
 * Parity with onnxruntime is checked by tests/ref/test_silero_ref.py.
 */
#define _POSIX_C_SOURCE 200809L
#include "audio.h"
#include "check.h"
#include "mapfile.h"
#include "silero.h"
#include "vad.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define SR 16000
#define CH SOTTO_SILERO_CHUNK

static char g_model[4096];
static char g_tmpdir[256];

typedef struct {
    uint64_t s;
} rng_t;
static uint64_t rng_u64(rng_t *r) {
    r->s ^= r->s >> 12;
    r->s ^= r->s << 25;
    r->s ^= r->s >> 27;
    return r->s * 2685821657736338717ULL;
}
static double rng_unif(rng_t *r) { return (double)(rng_u64(r) >> 11) * (1.0 / 9007199254740992.0); }
static double rng_gauss(rng_t *r) {
    double u = rng_unif(r), w = rng_unif(r);
    if (u < 1e-300) u = 1e-300;
    return sqrt(-2.0 * log(u)) * cos(2.0 * 3.14159265358979323846 * w);
}

/* White noise at `dbfs` RMS (0 dBFS = RMS 1). */
static void white(float *x, size_t n, double dbfs, uint64_t seed) {
    rng_t r = {seed * 0x9E3779B97F4A7C15ULL + 7};
    double rms = pow(10.0, dbfs / 20.0);
    for (size_t i = 0; i < n; i++) x[i] = (float)(rms * rng_gauss(&r));
}

/* ---- damaged files -------------------------------------------------------- */

static int write_file(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    size_t w = n ? fwrite(data, 1, n, f) : 0;
    int rc = fclose(f);
    return (w == n && rc == 0) ? 0 : -1;
}

/* Loads `data` (n bytes) written to a temporary file; expects failure with
 * `code` and a message containing `want` (if not NULL). */
static void expect_refused(const char *what, const void *data, size_t n, int code,
                           const char *want) {
    char path[512];
    snprintf(path, sizeof path, "%s/bad.safetensors", g_tmpdir);
    if (write_file(path, data, n) != 0) {
        CHECK_MSG(0, "%s: cannot write %s", what, path);
        return;
    }
    sotto_err err;
    sotto_err_clear(&err);
    sotto_silero_model *m = sotto_silero_load(path, &err);
    CHECK_MSG(m == NULL, "%s: accepted", what);
    CHECK_MSG(err.code == code, "%s: code %d (%s), want %d", what, err.code, err.msg, code);
    if (want)
        CHECK_MSG(strstr(err.msg, want) != NULL, "%s: message \"%s\" does not name %s", what,
                  err.msg, want);
    sotto_silero_model_free(m);
    unlink(path);
}

/* A copy of the file with the first `from` after `after` (in the header)
 * replaced by `to` (same length). NULL if not found. */
static unsigned char *patched(const unsigned char *data, size_t n, const char *after,
                              const char *from, const char *to) {
    uint64_t hlen;
    memcpy(&hlen, data, 8);
    unsigned char *c = malloc(n);
    if (!c) return NULL;
    memcpy(c, data, n);
    char *h = (char *)c + 8;
    char save = h[hlen - 1];
    h[hlen - 1] = '\0'; /* the header ends with a space or '}' */
    char *p = after ? strstr(h, after) : h;
    char *q = p ? strstr(p, from) : NULL;
    h[hlen - 1] = save;
    if (!q || strlen(from) != strlen(to)) {
        free(c);
        return NULL;
    }
    memcpy(q, to, strlen(to));
    return c;
}

static void test_damaged(void) {
    sotto_mapfile mf = {0};
    sotto_err err;
    if (sotto_mapfile_open(g_model, &mf, &err) != SOTTO_OK) {
        CHECK_MSG(0, "%s", err.msg);
        return;
    }
    const unsigned char *d = mf.data;
    size_t n = mf.size;
    uint64_t hlen;
    memcpy(&hlen, d, 8);
    /* truncations: inside the data, inside the header, in the length */
    expect_refused("truncated by 1 byte", d, n - 1, SOTTO_E_FORMAT, "truncated");
    expect_refused("truncated to half", d, n / 2, SOTTO_E_FORMAT, NULL);
    expect_refused("truncated in the header", d, 8 + hlen / 2, SOTTO_E_FORMAT, NULL);
    expect_refused("4 bytes", d, 4, SOTTO_E_FORMAT, NULL);
    expect_refused("empty", d, 0, SOTTO_E_FORMAT, NULL);

    static const struct {
        const char *what, *after, *from, *to, *want;
    } cases[] = {
        {"tensor renamed", NULL, "\"lstm.weight_hh\"", "\"lstm.weight_hX\"", "lstm.weight_hh"},
        {"tensor reshaped", NULL, "[128,129,3]", "[129,128,3]", "encoder.0.weight"},
        {"tensor retyped", "\"decoder.bias\"", "\"F32\"", "\"I32\"", "decoder.bias"},
        {"another format", NULL, "sotto-silero-vad", "sotto-silero-vax", "format"},
        {"another version", "format_version", "\"1\"", "\"9\"", "format_version"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        unsigned char *c = patched(d, n, cases[i].after, cases[i].from, cases[i].to);
        CHECK_MSG(c != NULL, "%s: pattern %s not in the header", cases[i].what, cases[i].from);
        if (!c) continue;
        expect_refused(cases[i].what, c, n, SOTTO_E_FORMAT, cases[i].want);
        free(c);
    }
    /* NaN weights: the first floats of the data area (of whichever tensor
     * comes first; convert_silero.py puts stft.forward_basis there) */
    unsigned char *c = malloc(n);
    if (c) {
        memcpy(c, d, n);
        float nan_v = NAN;
        for (int k = 0; k < 16; k++) memcpy(c + 8 + hlen + 4 * (size_t)k, &nan_v, 4);
        expect_refused("NaN weight", c, n, SOTTO_E_FORMAT, "non-finite");
        free(c);
    }
    /* not there */
    char path[512];
    snprintf(path, sizeof path, "%s/missing.safetensors", g_tmpdir);
    sotto_err_clear(&err);
    CHECK(sotto_silero_load(path, &err) == NULL);
    CHECK_EQ_INT(err.code, SOTTO_E_NOTFOUND);
    CHECK(sotto_silero_load(NULL, &err) == NULL);
    CHECK(sotto_silero_create(NULL, &err) == NULL);
    CHECK_EQ_INT(err.code, SOTTO_E_INVALID);
    sotto_silero_model_free(NULL);
    sotto_silero_free(NULL);
    sotto_silero_reset(NULL);
    sotto_mapfile_close(&mf);
}

/* ---- probabilities -------------------------------------------------------- */

static int load_jfk(sotto_audio *a) {
    char dir[4096], path[4200];
    const char *ad = getenv("SOTTO_AUDIO_DIR"), *src = getenv("SOTTO_SOURCE_DIR");
    if (ad)
        snprintf(dir, sizeof dir, "%s", ad);
    else
        snprintf(dir, sizeof dir, "%s/../shared/audio", src ? src : ".");
    snprintf(path, sizeof path, "%s/jfk.wav", dir);
    sotto_err err;
    int rc = sotto_audio_load_16k(path, a, &err);
    CHECK_MSG(rc == SOTTO_OK, "cannot load %s (set SOTTO_AUDIO_DIR to the dev audio set): %s", path,
              err.msg);
    return rc;
}

/* Probabilities of n / CH chunks of x on a fresh stream. */
static void probs(const sotto_silero_model *m, const float *x, size_t nch, float *p) {
    sotto_silero *s = sotto_silero_create(m, NULL);
    CHECK(s != NULL);
    if (!s) return;
    for (size_t c = 0; c < nch; c++) p[c] = sotto_silero_process(s, x + c * CH);
    sotto_silero_free(s);
}

static void test_probs(const sotto_silero_model *m) {
    /* digital silence, 5 s */
    size_t nch = 5 * SR / CH;
    float *x = calloc(nch * CH, sizeof *x), *p = malloc(nch * sizeof *p);
    if (!x || !p) {
        CHECK(0);
        free(x), free(p);
        return;
    }
    probs(m, x, nch, p);
    float mx = 0.0f;
    for (size_t c = 0; c < nch; c++) mx = p[c] > mx ? p[c] : mx;
    CHECK_MSG(mx < 0.02f, "silence: max probability %.4f", (double)mx);
    /* low white noise: the first chunks (onset from the zero state) reach
     * 0.16 at -50 dBFS with onnxruntime too; then it stays below ~0.04 */
    const double lv[] = {-60.0, -50.0, -45.0};
    for (int k = 0; k < 3; k++) {
        white(x, nch * CH, lv[k], 11 + (uint64_t)k);
        probs(m, x, nch, p);
        float m0 = 0.0f;
        mx = 0.0f;
        for (size_t c = 0; c < nch; c++) {
            if (c < 4) m0 = p[c] > m0 ? p[c] : m0;
            else mx = p[c] > mx ? p[c] : mx;
        }
        CHECK_MSG(m0 < 0.3f && mx < 0.1f,
                  "white noise at %.0f dBFS: max probability %.4f (first 4 chunks), %.4f (rest)",
                  lv[k], (double)m0, (double)mx);
    }
    /* non-finite input counts as zero */
    for (size_t i = 0; i < nch * CH; i++) x[i] = (i % 3) ? NAN : INFINITY;
    probs(m, x, 8, p);
    for (int c = 0; c < 8; c++) CHECK_MSG(p[c] >= 0.0f && p[c] < 0.02f, "NaN input: %g", p[c]);
    free(x);
    free(p);

    /* speech: chunks within 20 dB of the loudest chunk of jfk.wav */
    sotto_audio a;
    if (load_jfk(&a) != SOTTO_OK) return;
    nch = a.n / CH;
    p = malloc(nch * sizeof *p);
    float *q = malloc(nch * sizeof *q);
    double *e = malloc(nch * sizeof *e);
    if (!p || !q || !e) {
        CHECK(0);
        free(p), free(q), free(e), sotto_audio_free(&a);
        return;
    }
    double emax = -200.0;
    for (size_t c = 0; c < nch; c++) {
        double s2 = 0.0;
        for (int i = 0; i < CH; i++) s2 += (double)a.samples[c * CH + i] * a.samples[c * CH + i];
        e[c] = 10.0 * log10(s2 / CH + 1e-12);
        emax = e[c] > emax ? e[c] : emax;
    }
    probs(m, a.samples, nch, p);
    size_t loud = 0, high = 0;
    for (size_t c = 0; c < nch; c++)
        if (e[c] > emax - 20.0) {
            loud++;
            high += p[c] > 0.8f;
        }
    CHECK_MSG(loud > 100 && high >= loud * 9 / 10,
              "jfk.wav: %zu of %zu loud chunks have probability > 0.8", high, loud);
    fprintf(stderr, "jfk.wav: %zu of %zu loud chunks > 0.8\n", high, loud);

    /* reset gives identical outputs; so does a second stream on the model */
    sotto_silero *s = sotto_silero_create(m, NULL);
    CHECK(s != NULL);
    if (s) {
        for (size_t c = 0; c < nch; c++) q[c] = sotto_silero_process(s, a.samples + c * CH);
        CHECK(memcmp(p, q, nch * sizeof *p) == 0);
        sotto_silero_reset(s);
        for (size_t c = 0; c < nch; c++) q[c] = sotto_silero_process(s, a.samples + c * CH);
        CHECK(memcmp(p, q, nch * sizeof *p) == 0);
        /* reset in the middle of speech, then the same input again */
        sotto_silero_reset(s);
        for (size_t c = 0; c < nch / 2; c++) q[c] = sotto_silero_process(s, a.samples + c * CH);
        sotto_silero_reset(s);
        for (size_t c = 0; c < nch; c++) q[c] = sotto_silero_process(s, a.samples + c * CH);
        CHECK(memcmp(p, q, nch * sizeof *p) == 0);
        /* the state matters: without reset the outputs differ */
        float r0 = sotto_silero_process(s, a.samples);
        CHECK(r0 != p[0]);
        /* speed (informational: this build may have sanitizers) */
        sotto_silero_reset(s);
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        for (size_t c = 0; c < nch; c++) q[c] = sotto_silero_process(s, a.samples + c * CH);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        double us = 1e6 * ((double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec));
        fprintf(stderr, "silero: %.1f us per chunk (%zu chunks)\n", us / (double)nch, nch);
        sotto_silero_free(s);
    }
    free(p);
    free(q);
    free(e);
    sotto_audio_free(&a);
}

/* ---- the endpointer ------------------------------------------------------- */

#define MAX_EV 64

typedef struct {
    sotto_vad_event ev[MAX_EV];
    int n;
} events_t;

/* Pushes x in pseudo-random sizes (1..3000 samples), then finish. */
static void run(sotto_vad *v, const float *x, size_t n, uint64_t seed, events_t *E) {
    rng_t r = {seed + 99};
    E->n = 0;
    size_t i = 0;
    while (i < n) {
        size_t k = 1 + (size_t)(rng_u64(&r) % 3000);
        if (k > n - i) k = n - i;
        int got = 0;
        int rc = sotto_vad_push(v, x + i, k, E->ev + E->n, MAX_EV - E->n, &got);
        CHECK_EQ_INT(rc, SOTTO_OK);
        E->n += got;
        i += k;
    }
    int got = 0;
    CHECK_EQ_INT(sotto_vad_finish(v, E->ev + E->n, MAX_EV - E->n, &got), SOTTO_OK);
    E->n += got;
}

static void test_params(const sotto_silero_model *m) {
    sotto_vad_params d = sotto_vad_default_params();
    CHECK_EQ_INT(d.kind, SOTTO_VAD_ENERGY);
    CHECK(d.speech_threshold == 0.5f && d.neg_threshold == 0.35f && d.silero == NULL);
    sotto_err err;
    sotto_vad_params p = d;
    p.kind = SOTTO_VAD_SILERO;
    sotto_err_clear(&err);
    CHECK(sotto_vad_create(&p, &err) == NULL);
    CHECK_EQ_INT(err.code, SOTTO_E_INVALID);
    CHECK_MSG(strstr(err.msg, "silero") != NULL, "\"%s\"", err.msg);
    p.silero = m;
    CHECK_EQ_INT(sotto_vad_params_check(&p, NULL), SOTTO_OK);
    p.frame_ms = 32; /* ignored for SILERO */
    p.threshold_db = -1.0f;
    CHECK_EQ_INT(sotto_vad_params_check(&p, NULL), SOTTO_OK);
    struct {
        const char *field;
        sotto_vad_params p;
    } bad[7];
    for (int i = 0; i < 7; i++) bad[i].p = p;
    bad[0].field = "speech_threshold", bad[0].p.speech_threshold = 0.0f;
    bad[1].field = "speech_threshold", bad[1].p.speech_threshold = 1.5f;
    bad[2].field = "speech_threshold", bad[2].p.speech_threshold = NAN;
    bad[3].field = "neg_threshold", bad[3].p.neg_threshold = 0.6f;
    bad[4].field = "neg_threshold", bad[4].p.neg_threshold = -0.1f;
    bad[5].field = "kind", bad[5].p.kind = 2;
    bad[6].field = "silence_ms", bad[6].p.silence_ms = -1;
    for (int i = 0; i < 7; i++) {
        sotto_err_clear(&err);
        CHECK_EQ_INT(sotto_vad_params_check(&bad[i].p, &err), SOTTO_E_INVALID);
        CHECK_MSG(strstr(err.msg, bad[i].field) != NULL, "case %d: \"%s\" does not name %s", i,
                  err.msg, bad[i].field);
        CHECK(sotto_vad_create(&bad[i].p, NULL) == NULL);
    }
    sotto_vad *v = sotto_vad_create(&p, &err);
    CHECK(v != NULL);
    CHECK_EQ_INT(sotto_vad_frame_samples(v), CH);
    CHECK(sotto_vad_frame_prob(v, 0) == -1.0f);
    CHECK(sotto_vad_noise_floor_db(v) <= -100.0f);
    sotto_vad_free(v);
    /* the energy kind: frame_samples and 0/1 probabilities */
    v = sotto_vad_create(&d, NULL);
    CHECK(v != NULL);
    CHECK_EQ_INT(sotto_vad_frame_samples(v), 320);
    float z[640] = {0};
    int k;
    CHECK_EQ_INT(sotto_vad_push(v, z, 640, NULL, 0, &k), SOTTO_OK);
    CHECK(sotto_vad_frame_prob(v, 0) == 0.0f && sotto_vad_frame_prob(v, 1) == 0.0f);
    CHECK(sotto_vad_frame_prob(v, 2) == -1.0f);
    sotto_vad_free(v);
    CHECK_EQ_INT(sotto_vad_frame_samples(NULL), 0);
    CHECK(sotto_vad_frame_prob(NULL, 0) == -1.0f);
}

static void test_endpoint(const sotto_silero_model *m) {
    sotto_audio a;
    if (load_jfk(&a) != SOTTO_OK) return;
    size_t pad = 2 * SR, n = a.n + 2 * pad;
    float *x = calloc(n, sizeof *x);
    if (!x) {
        CHECK(0);
        sotto_audio_free(&a);
        return;
    }
    memcpy(x + pad, a.samples, a.n * sizeof *x);
    /* reference extent: first/last 20 ms frame within 30 dB of the loudest */
    size_t L = 320, first = 0, last = 0;
    double mx = -200.0;
    for (int pass = 0; pass < 2; pass++)
        for (size_t f = 0; f < a.n / L; f++) {
            double s2 = 0.0;
            for (size_t i = 0; i < L; i++) s2 += (double)a.samples[f * L + i] * a.samples[f * L + i];
            double e = 10.0 * log10(s2 / (double)L + 1e-12);
            if (pass == 0 && e > mx) mx = e;
            if (pass == 1 && e > mx - 30.0) {
                if (!last) first = pad + f * L;
                last = pad + (f + 1) * L;
            }
        }
    sotto_vad_params p = sotto_vad_default_params();
    p.kind = SOTTO_VAD_SILERO;
    p.silero = m;
    /* JFK pauses for up to ~1.3 s between phrases (see test_vad.c) */
    p.silence_ms = 1500;
    static events_t E;
    for (uint64_t seed = 1; seed <= 2; seed++) {
        sotto_vad *v = sotto_vad_create(&p, NULL);
        CHECK(v != NULL);
        if (!v) break;
        run(v, x, n, seed, &E);
        CHECK_MSG(E.n == 2, "jfk.wav padded: %d events (want one utterance)", E.n);
        if (E.n >= 2) {
            double s0 = (double)E.ev[0].sample / SR, s1 = (double)E.ev[E.n - 1].sample / SR;
            double f0 = (double)first / SR, f1 = (double)last / SR;
            fprintf(stderr, "jfk.wav padded: utterance %.2f..%.2f s, speech %.2f..%.2f s\n", s0, s1,
                    f0, f1);
            CHECK_EQ_INT(E.ev[0].type, SOTTO_VAD_SPEECH_START);
            CHECK_EQ_INT(E.ev[1].type, SOTTO_VAD_SPEECH_END);
            CHECK_MSG(fabs(s0 - f0) < 0.5, "start %.2f s, speech from %.2f s", s0, f0);
            CHECK_MSG(s1 >= f1 - 0.2 && s1 < f1 + 1.0, "end %.2f s, speech until %.2f s", s1, f1);
        }
        /* frame probabilities are the network's, on the same chunks; the
         * decisions follow the thresholds (in between: hysteresis) */
        if (seed == 1) {
            sotto_silero *s = sotto_silero_create(m, NULL);
            uint64_t nf = n / CH, bad = 0, bad_dec = 0;
            for (uint64_t f = 0; f < nf && s; f++) {
                float pr = sotto_silero_process(s, x + f * CH);
                if (nf - f <= 4096) {
                    bad += sotto_vad_frame_prob(v, f) != pr;
                    int dec = sotto_vad_frame_decision(v, f);
                    if (pr >= p.speech_threshold && dec != 1) bad_dec++;
                    if (pr < p.neg_threshold && dec != 0) bad_dec++;
                }
            }
            CHECK_EQ_INT(bad, 0);
            CHECK_EQ_INT(bad_dec, 0);
            CHECK(sotto_vad_frame_prob(v, nf) == -1.0f);
            sotto_silero_free(s);
        }
        sotto_vad_free(v);
    }
    free(x);

    /* 10 s of white noise at -30 dBFS: nothing */
    n = 10 * SR;
    x = malloc(n * sizeof *x);
    if (x) {
        for (uint64_t seed = 1; seed <= 2; seed++) {
            white(x, n, -30.0, 100 + seed);
            sotto_vad *v = sotto_vad_create(&p, NULL);
            CHECK(v != NULL);
            if (!v) break;
            run(v, x, n, seed, &E);
            CHECK_MSG(E.n == 0, "white noise at -30 dBFS: %d events", E.n);
            float pm = 0.0f;
            for (uint64_t f = 0; f < n / CH; f++) {
                float pr = sotto_vad_frame_prob(v, f);
                pm = pr > pm ? pr : pm;
            }
            fprintf(stderr, "white noise at -30 dBFS: max probability %.3f\n", (double)pm);
            sotto_vad_free(v);
        }
    }
    free(x);
    sotto_audio_free(&a);
}

int main(void) {
    const char *src = getenv("SOTTO_SOURCE_DIR");
    snprintf(g_model, sizeof g_model, "%s/models/silero_vad/silero_vad.safetensors",
             src ? src : ".");
    sotto_err err;
    sotto_err_clear(&err);
    sotto_silero_model *m = sotto_silero_load(g_model, &err);
    CHECK_MSG(m != NULL, "%s (run scripts/fetch_silero.sh to fetch and convert the model)",
              err.msg);
    if (!m) return check_report();
    snprintf(g_tmpdir, sizeof g_tmpdir, "/tmp/sotto_silero_XXXXXX");
    if (!mkdtemp(g_tmpdir)) {
        CHECK_MSG(0, "mkdtemp failed");
    } else {
        test_damaged();
        rmdir(g_tmpdir);
    }
    test_params(m);
    test_probs(m);
    test_endpoint(m);
    sotto_silero_model_free(m);
    return check_report();
}
