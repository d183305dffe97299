/* test_vad.c - voice activity detection: parameter checks, silence, noise at
 * several levels and colours, noise-level jumps, clicks and tone bursts,
 * a speech-like signal in noise (onset delay, pre-roll, endpoint), push
 * sizes, event capacity, finish, and one real recording (jfk.wav from the
 * dev set: $SOTTO_AUDIO_DIR, else $SOTTO_SOURCE_DIR/../shared/audio; a
 * missing file is a failure). */
#define _POSIX_C_SOURCE 200809L
#include "audio.h"
#include "check.h"
#include "vad.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#ifndef M_PI
#define M_PI 3.14159265358979323846
#endif

#define SR 16000
#define MAX_EV 256

/* Bound on how long the noise floor takes to follow a sudden 20 dB rise of
 * stationary noise (to within 3 dB), asserted below. The floor follows a
 * rise through the flat-spectrum rule (3 frames whose whitened spectrum is
 * flat, then a 100 ms time constant; else the 1 s minimum window); measured
 * 0.10-0.30 s over 40 noise seeds. The false utterance this may start must
 * end (END returned) within ADAPT_BOUND_S + silence_ms + 0.1 s of the step;
 * usually there is none, as the flat frames of a step are vetoed. */
#define ADAPT_BOUND_S 0.6
/* ... and a fall by 20 dB: the floor is clamped to 10 dB above the 1 s
 * minimum of the smoothed power, then averages down (600 ms time constant);
 * measured 1.6-1.85 s. A slow fall only costs sensitivity for that time. */
#define DOWN_BOUND_S 2.5

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
    return sqrt(-2.0 * log(u)) * cos(2.0 * M_PI * w);
}

/* Adds white (pink = 0) or pink (pink = 1) noise of RMS `rms` to x. */
static void add_noise(float *x, size_t n, double rms, int pink, uint64_t seed) {
    rng_t r = {seed * 0x9E3779B97F4A7C15ULL + 1};
    double b0 = 0, b1 = 0, b2 = 0, b3 = 0, b4 = 0, b5 = 0, b6 = 0;
    double g = pink ? rms / 3.2 : rms; /* Kellet's filter has gain ~3.2 on unit white noise */
    for (size_t i = 0; i < n; i++) {
        double w = rng_gauss(&r), y = w;
        if (pink) {
            b0 = 0.99886 * b0 + w * 0.0555179;
            b1 = 0.99332 * b1 + w * 0.0750759;
            b2 = 0.96900 * b2 + w * 0.1538520;
            b3 = 0.86650 * b3 + w * 0.3104856;
            b4 = 0.55000 * b4 + w * 0.5329522;
            b5 = -0.7616 * b5 - w * 0.0168980;
            y = b0 + b1 + b2 + b3 + b4 + b5 + b6 + w * 0.5362;
            b6 = w * 0.115926;
        }
        x[i] += (float)(g * y);
    }
}

static double power(const float *x, size_t n) {
    double s = 0.0;
    for (size_t i = 0; i < n; i++) s += (double)x[i] * x[i];
    return n ? s / (double)n : 0.0;
}

/* Speech-like signal: a vowel-like harmonic tone (F0 140 Hz with a slow
 * vibrato, harmonics to 4 kHz shaped by formant resonances at 700, 1200 and
 * 2600 Hz), amplitude-modulated at 4 Hz syllable rate by sin^2 (so it starts
 * and ends at an envelope zero when secs is a multiple of 0.25 s). Adds
 * secs*SR samples at `at` with RMS `rms`. */
static double formants(double f) {
    static const double F[3] = {700.0, 1200.0, 2600.0}, B[3] = {110.0, 120.0, 160.0},
                        A[3] = {1.0, 0.6, 0.25};
    double a = 0.0;
    for (int i = 0; i < 3; i++) a += A[i] / sqrt(1.0 + pow((f - F[i]) / (0.5 * B[i]), 2.0));
    return a;
}

static void add_speechlike(float *x, size_t at, double secs, double rms) {
    size_t n = (size_t)(secs * SR);
    float *y = malloc(n * sizeof *y);
    double amp[32];
    for (int h = 1; h < 32; h++) amp[h] = formants(140.0 * h) + 0.02;
    double ph = 0.0;
    for (size_t i = 0; i < n; i++) {
        double t = (double)i / SR;
        double f0 = 140.0 * (1.0 + 0.05 * sin(2.0 * M_PI * 1.3 * t));
        ph += 2.0 * M_PI * f0 / SR;
        double s = 0.0;
        for (int h = 1; h < 29; h++) s += amp[h] * sin(h * ph + 0.7 * h * h);
        double env = sin(M_PI * 4.0 * t);
        y[i] = (float)(s * env * env);
    }
    double g = rms / sqrt(power(y, n));
    for (size_t i = 0; i < n; i++) x[at + i] += (float)(g * y[i]);
    free(y);
}

typedef struct {
    sotto_vad_event ev[MAX_EV];
    int n;
    uint64_t emit[MAX_EV]; /* samples pushed when the event was returned */
    int rc_bad;
} events_t;

/* Pushes x in pieces of `chunk` samples (0: seeded random 1..5000) with an
 * event buffer of `cap`, draining with empty pushes on SOTTO_E_RANGE; then
 * finish() if `fin`. */
static void run(sotto_vad *v, const float *x, size_t n, size_t chunk, int cap, int fin,
                events_t *e) {
    memset(e, 0, sizeof *e);
    rng_t r = {77};
    size_t pos = 0;
    for (;;) {
        size_t m = chunk ? chunk : 1 + (size_t)(rng_u64(&r) % 5000);
        if (m > n - pos) m = n - pos;
        int done = m == 0;
        const float *p = x + pos;
        pos += m;
        for (int first = 1;; first = 0) {
            sotto_vad_event ev[64];
            int k = -1, rc;
            if (done && first && fin)
                rc = sotto_vad_finish(v, ev, cap, &k);
            else
                rc = sotto_vad_push(v, first ? p : NULL, first ? m : 0, ev, cap, &k);
            if (rc != SOTTO_OK && rc != SOTTO_E_RANGE) e->rc_bad++;
            for (int i = 0; i < k && e->n < MAX_EV; i++) {
                e->emit[e->n] = pos;
                e->ev[e->n++] = ev[i];
            }
            if (rc != SOTTO_E_RANGE) break;
        }
        if (done) break;
    }
}

/* Events alternate START/END with increasing samples; returns 1 if so. */
static int well_formed(const events_t *e) {
    uint64_t last = 0;
    for (int i = 0; i < e->n; i++) {
        if (e->ev[i].type != (i % 2 == 0 ? SOTTO_VAD_SPEECH_START : SOTTO_VAD_SPEECH_END)) return 0;
        if (i > 0 && (i % 2 == 1 ? e->ev[i].sample <= last : e->ev[i].sample < last)) return 0;
        if (e->ev[i].sample > e->emit[i]) return 0; /* never ahead of the audio */
        last = e->ev[i].sample;
    }
    return 1;
}

/* Total length (s) of utterances (START..END pairs). */
static double speech_secs(const events_t *e) {
    double s = 0.0;
    for (int i = 0; i + 1 < e->n; i += 2) s += (double)(e->ev[i + 1].sample - e->ev[i].sample) / SR;
    return s;
}

static events_t E; /* scratch (large) */

static void test_params(void) {
    sotto_vad_params d = sotto_vad_default_params();
    sotto_err err;
    CHECK_EQ_INT(sotto_vad_params_check(&d, &err), SOTTO_OK);
    CHECK_EQ_INT(d.frame_ms, 20);
    CHECK(d.threshold_db > 0.0f && d.threshold_db <= 40.0f);
    CHECK(d.min_speech_ms >= 60 && d.min_speech_ms <= 250);
    CHECK(d.silence_ms >= 300 && d.silence_ms <= 1000);
    struct {
        const char *field;
        sotto_vad_params p;
    } bad[10];
    for (int i = 0; i < 10; i++) bad[i].p = d;
    bad[0].field = "frame_ms", bad[0].p.frame_ms = 15;
    bad[1].field = "frame_ms", bad[1].p.frame_ms = 0;
    bad[2].field = "threshold_db", bad[2].p.threshold_db = -0.5f;
    bad[3].field = "threshold_db", bad[3].p.threshold_db = 40.5f;
    bad[4].field = "threshold_db", bad[4].p.threshold_db = NAN;
    bad[5].field = "min_speech_ms", bad[5].p.min_speech_ms = -1;
    bad[6].field = "silence_ms", bad[6].p.silence_ms = 10001;
    bad[7].field = "preroll_ms", bad[7].p.preroll_ms = -20;
    bad[8].field = "tail_ms", bad[8].p.tail_ms = 20000;
    bad[9].field = "frame_ms", bad[9].p.frame_ms = 40;
    for (int i = 0; i < 10; i++) {
        sotto_err_clear(&err);
        int rc = sotto_vad_params_check(&bad[i].p, &err);
        CHECK_EQ_INT(rc, SOTTO_E_INVALID);
        CHECK_EQ_INT(err.code, SOTTO_E_INVALID);
        CHECK_MSG(strstr(err.msg, bad[i].field) != NULL, "case %d: \"%s\" does not name %s", i,
                  err.msg, bad[i].field);
        sotto_vad *v = sotto_vad_create(&bad[i].p, &err);
        CHECK(v == NULL);
        sotto_vad_free(v);
    }
    CHECK_EQ_INT(sotto_vad_params_check(NULL, &err), SOTTO_E_INVALID);
    /* the edges of the ranges are valid */
    sotto_vad_params e = d;
    e.frame_ms = 10, e.threshold_db = 0.0f, e.min_speech_ms = 0, e.silence_ms = 0, e.preroll_ms = 0,
    e.tail_ms = 0;
    CHECK_EQ_INT(sotto_vad_params_check(&e, NULL), SOTTO_OK);
    e.frame_ms = 30, e.threshold_db = 40.0f, e.min_speech_ms = 10000, e.silence_ms = 10000,
    e.preroll_ms = 10000, e.tail_ms = 10000;
    CHECK_EQ_INT(sotto_vad_params_check(&e, NULL), SOTTO_OK);
    /* NULL params: defaults */
    sotto_vad *v = sotto_vad_create(NULL, &err);
    CHECK(v != NULL);
    /* bad arguments */
    float x[16] = {0};
    sotto_vad_event ev[2];
    int k = 5;
    CHECK_EQ_INT(sotto_vad_push(NULL, x, 16, ev, 2, &k), SOTTO_E_INVALID);
    CHECK_EQ_INT(k, 0);
    CHECK_EQ_INT(sotto_vad_push(v, NULL, 16, ev, 2, &k), SOTTO_E_INVALID);
    CHECK_EQ_INT(sotto_vad_push(v, x, 16, ev, -1, &k), SOTTO_E_INVALID);
    CHECK_EQ_INT(sotto_vad_push(v, x, 16, NULL, 2, &k), SOTTO_E_INVALID);
    CHECK_EQ_INT(sotto_vad_push(v, NULL, 0, NULL, 0, &k), SOTTO_OK);
    CHECK_EQ_INT(sotto_vad_finish(NULL, ev, 2, &k), SOTTO_E_INVALID);
    CHECK_EQ_INT(sotto_vad_frame_decision(v, 0), -1); /* nothing pushed yet */
    CHECK_EQ_INT(sotto_vad_in_speech(NULL), 0);
    sotto_vad_free(v);
    sotto_vad_free(NULL);
}

static void test_silence(void) {
    const int frames[] = {10, 20, 30};
    for (int f = 0; f < 3; f++) {
        sotto_vad_params p = sotto_vad_default_params();
        p.frame_ms = frames[f];
        sotto_vad *v = sotto_vad_create(&p, NULL);
        size_t n = 130 * SR; /* longer than the 4096-frame decision history */
        float *x = calloc(n, sizeof *x);
        run(v, x, n, 4000, 8, 1, &E);
        CHECK_EQ_INT(E.n, 0);
        CHECK_EQ_INT(E.rc_bad, 0);
        CHECK_EQ_INT(sotto_vad_in_speech(v), 0);
        int any = 0;
        uint64_t nf = n / (uint64_t)(SR / 1000 * p.frame_ms);
        for (uint64_t i = nf - 100; i < nf; i++) any |= sotto_vad_frame_decision(v, i) != 0;
        CHECK(!any);
        CHECK_EQ_INT(sotto_vad_frame_decision(v, nf), -1); /* not yet pushed */
        CHECK_EQ_INT(sotto_vad_frame_decision(v, 0), -1);  /* older than the history */
        CHECK(sotto_vad_noise_floor_db(v) < -100.0f);
        /* NaN and inf samples are ignored (treated as 0), not a poisoned floor */
        for (size_t i = 0; i < 4000; i++) x[i] = (i % 3) ? NAN : INFINITY;
        run(v, x, 4000, 333, 8, 0, &E);
        CHECK_EQ_INT(E.n, 0);
        CHECK(isfinite(sotto_vad_noise_floor_db(v)));
        free(x);
        sotto_vad_free(v);
    }
}

/* Stationary noise alone at levels from below the gate to near full scale:
 * no utterance at all. */
static void test_noise_levels(void) {
    const double dbfs[] = {-80, -60, -40, -20, -6};
    for (int pink = 0; pink < 2; pink++)
        for (int i = 0; i < 5; i++) {
            sotto_vad *v = sotto_vad_create(NULL, NULL);
            size_t n = 30 * SR;
            float *x = calloc(n, sizeof *x);
            add_noise(x, n, pow(10.0, dbfs[i] / 20.0), pink, 10 + (uint64_t)i);
            run(v, x, n, 0, 8, 1, &E);
            CHECK_MSG(E.n == 0, "%s noise at %.0f dBFS: %d events (%.2f s of speech)",
                      pink ? "pink" : "white", dbfs[i], E.n, speech_secs(&E));
            if (dbfs[i] > -70 && !pink) /* white: 92% of its power is in the 125..7500 Hz bands */
                CHECK_MSG(fabs(sotto_vad_noise_floor_db(v) - dbfs[i]) < 3.0,
                          "floor %.1f dB for noise at %.0f dBFS", sotto_vad_noise_floor_db(v),
                          dbfs[i]);
            free(x);
            sotto_vad_free(v);
        }
}

/* Noise that jumps by +20 dB (and later back down): at most a short false
 * utterance, and the floor follows within ADAPT_BOUND_S. Speech-like sound
 * after the jump is still found. */
static void test_noise_jump(void) {
    for (int pink = 0; pink < 2; pink++) {
        sotto_vad_params p = sotto_vad_default_params();
        sotto_vad *v = sotto_vad_create(&p, NULL);
        size_t n = 24 * SR, jump = 5 * SR, down = 14 * SR;
        float *x = calloc(n, sizeof *x);
        add_noise(x, jump, 0.003, pink, 21);              /* -50 dBFS */
        add_noise(x + jump, down - jump, 0.03, pink, 22); /* -30 dBFS */
        add_noise(x + down, n - down, 0.003, pink, 23);   /* back to -50 */
        add_speechlike(x, 10 * SR, 2.0, 0.03);            /* 0 dB SNR after the jump */
        add_speechlike(x, 18 * SR, 2.0, 0.01);            /* 10 dB SNR after the drop */
        /* push frame by frame and watch the floor */
        size_t L = (size_t)(SR / 1000 * p.frame_ms);
        double adapt = -1.0, down_adapt = -1.0;
        float fl_low = 0.0f, fl_high = 0.0f;
        memset(&E, 0, sizeof E);
        for (size_t pos = 0; pos < n; pos += L) {
            sotto_vad_event ev[4];
            int k = 0;
            CHECK_EQ_INT(sotto_vad_push(v, x + pos, L, ev, 4, &k), SOTTO_OK);
            for (int i = 0; i < k; i++) {
                E.emit[E.n] = pos + L;
                E.ev[E.n++] = ev[i];
            }
            float fl = sotto_vad_noise_floor_db(v);
            if (pos + L == jump) fl_low = fl;
            if (pos + L == 10 * SR) fl_high = fl; /* before the speech-like sound */
            if (pos >= jump && adapt < 0 && fl > fl_low + 17.0f)
                adapt = (double)(pos + L - jump) / SR;
            if (pos >= down && down_adapt < 0 && fl < fl_high - 17.0f)
                down_adapt = (double)(pos + L - down) / SR;
        }
        CHECK(well_formed(&E));
        fprintf(stderr, "%s noise +20 dB: floor followed in %.2f s, -20 dB in %.2f s; %d events\n",
                pink ? "pink" : "white", adapt, down_adapt, E.n);
        CHECK_MSG(adapt >= 0 && adapt <= ADAPT_BOUND_S, "%s: +20 dB adaptation took %.2f s",
                  pink ? "pink" : "white", adapt);
        CHECK_MSG(fl_high - fl_low > 19.0f && fl_high - fl_low < 21.0f, "%s: floor %.1f -> %.1f dB",
                  pink ? "pink" : "white", fl_low, fl_high);
        CHECK_MSG(down_adapt >= 0 && down_adapt <= DOWN_BOUND_S,
                  "%s: -20 dB adaptation took %.2f s", pink ? "pink" : "white", down_adapt);
        /* events: the two speech-like segments, plus at most one short false
         * utterance at the jump that ends within the bound */
        int found1 = 0, found2 = 0, false_utts = 0;
        for (int i = 0; i + 1 < E.n; i += 2) {
            uint64_t s = E.ev[i].sample, e = E.ev[i + 1].sample;
            if (s < 12 * SR && e > 10 * SR)
                found1++;
            else if (s < 20 * SR && e > 18 * SR)
                found2++;
            else {
                false_utts++;
                CHECK_MSG(s >= jump - (size_t)p.preroll_ms * 16 &&
                              E.emit[i + 1] <=
                                  jump + (size_t)((ADAPT_BOUND_S * 1000 + p.silence_ms + 100) * 16),
                          "false utterance %.2f..%.2f s (ended at %.2f s)", (double)s / SR,
                          (double)e / SR, (double)E.emit[i + 1] / SR);
            }
        }
        CHECK_MSG(found1 == 1 && found2 == 1, "%s: speech after jump %d, after drop %d",
                  pink ? "pink" : "white", found1, found2);
        CHECK_MSG(false_utts <= 1, "%d false utterances", false_utts);
        free(x);
        sotto_vad_free(v);
    }
}

/* Mains hum (50 Hz + harmonics) that switches on: its whitened spectrum is
 * not flat, so the floor follows through the steady-level rule (0.5 s of a
 * steady score); at most one short false utterance. */
static void test_hum_onset(void) {
    sotto_vad_params p = sotto_vad_default_params();
    size_t n = 15 * SR, on = 5 * SR;
    float *x = calloc(n, sizeof *x);
    add_noise(x, n, 0.001, 0, 70);
    for (size_t i = on; i < n; i++) {
        double s = 0.0;
        for (int h = 1; h <= 20; h++)
            s += sin(2.0 * M_PI * 50.0 * h * (double)i / SR + h) / sqrt((double)h);
        x[i] += (float)(0.01 * s);
    }
    add_speechlike(x, 11 * SR, 2.0, 0.03);
    sotto_vad *v = sotto_vad_create(&p, NULL);
    run(v, x, n, 0, 8, 1, &E);
    CHECK(well_formed(&E));
    int found = 0, false_utts = 0;
    for (int i = 0; i + 1 < E.n; i += 2) {
        if (E.ev[i].sample < 13 * SR && E.ev[i + 1].sample > 11 * SR)
            found++;
        else {
            false_utts++;
            CHECK_MSG(E.ev[i + 1].sample <= on + (size_t)(1.0 * SR) + (size_t)p.tail_ms * 16,
                      "hum: false utterance %.2f..%.2f s", (double)E.ev[i].sample / SR,
                      (double)E.ev[i + 1].sample / SR);
        }
    }
    fprintf(stderr, "hum onset: %d false utterance(s)\n", false_utts);
    CHECK_EQ_INT(found, 1);
    CHECK(false_utts <= 1);
    sotto_vad_free(v);
    free(x);
}

/* Clicks, tone bursts 5 ms shorter than min_speech and keystroke trains:
 * no utterance, for every frame size. */
static void test_clicks(void) {
    for (int fm = 10; fm <= 30; fm += 10) {
        sotto_vad_params p = sotto_vad_default_params();
        p.frame_ms = fm;
        size_t n = 12 * SR;
        float *x = calloc(n, sizeof *x);
        add_noise(x, n, 0.001, 1, 31); /* quiet room, -60 dBFS pink */
        /* 1 kHz tone bursts, 1 s apart, at 5 offsets within a frame */
        double burst_s = (p.min_speech_ms - 5) / 1000.0;
        for (int b = 0; b < 5; b++) {
            size_t at = (size_t)(0.5 * SR) + (size_t)b * SR + (size_t)b * 67;
            for (size_t i = 0; i < (size_t)(burst_s * SR); i++)
                x[at + i] += (float)(0.3 * sin(2.0 * M_PI * 1000.0 * (double)i / SR));
        }
        /* single clicks (decaying noise, 5 ms) */
        rng_t r = {5};
        for (int c = 0; c < 3; c++) {
            size_t at = (size_t)((5.3 + 0.5 * c) * SR);
            for (size_t i = 0; i < 80; i++)
                x[at + i] += (float)(0.5 * rng_gauss(&r) * exp(-(double)i / 20.0));
        }
        /* typing: keystrokes every 90..140 ms for 4 s */
        for (double t = 7.5; t < 11.5; t += 0.09 + 0.05 * rng_unif(&r)) {
            size_t at = (size_t)(t * SR);
            for (size_t i = 0; i < 120; i++)
                x[at + i] += (float)(0.2 * rng_gauss(&r) * exp(-(double)i / 30.0));
        }
        sotto_vad *v = sotto_vad_create(&p, NULL);
        run(v, x, n, 0, 8, 1, &E);
        CHECK_MSG(E.n == 0, "%d ms frames: clicks/bursts gave %d events, first at %.2f s", fm, E.n,
                  E.n ? (double)E.ev[0].sample / SR : 0.0);
        sotto_vad_free(v);
        /* a speech-like burst longer than min_speech is reported */
        memset(x, 0, n * sizeof *x);
        add_noise(x, n, 0.001, 1, 32);
        add_speechlike(x, 3 * SR, 0.5, 0.05);
        v = sotto_vad_create(&p, NULL);
        run(v, x, n, 0, 8, 1, &E);
        CHECK_MSG(E.n == 2, "%d ms frames: 0.5 s burst gave %d events", fm, E.n);
        sotto_vad_free(v);
        free(x);
    }
}

/* Speech-like signal at 10 dB SNR in white and pink noise: one utterance,
 * START within min_speech + 200 ms of the onset with the pre-roll applied,
 * END within silence_ms + one frame of the end, end sample covering it. */
static void test_speechlike(void) {
    for (int pink = 0; pink < 2; pink++)
        for (int fm = 10; fm <= 30; fm += 10) {
            sotto_vad_params p = sotto_vad_default_params();
            p.frame_ms = fm;
            size_t n = 10 * SR, on = (size_t)(3.01 * SR), dur = 3 * SR, off = on + dur;
            float *x = calloc(n, sizeof *x);
            double srms = 0.05;
            add_speechlike(x, on, (double)dur / SR, srms);
            add_noise(x, n, srms / pow(10.0, 10.0 / 20.0), pink, 40 + (uint64_t)fm);
            sotto_vad *v = sotto_vad_create(&p, NULL);
            run(v, x, n, 0, 8, 0, &E);
            const char *name = pink ? "pink" : "white";
            CHECK(well_formed(&E));
            CHECK_MSG(E.n == 2, "%s %d ms: %d events", name, fm, E.n);
            if (E.n == 2) {
                double start = (double)E.ev[0].sample / SR, emit = (double)E.emit[0] / SR;
                double end = (double)E.ev[1].sample / SR, emit_end = (double)E.emit[1] / SR;
                double t_on = (double)on / SR, t_off = (double)off / SR;
                double pre = p.preroll_ms / 1000.0, fr = fm / 1000.0;
                /* the push granularity adds up to 5000 samples to emit times */
                CHECK_MSG(emit - t_on <= p.min_speech_ms / 1000.0 + 0.2 + 5000.0 / SR,
                          "%s %d ms: START returned %.3f s after the onset", name, fm, emit - t_on);
                CHECK_MSG(start <= t_on - pre + 0.1 && start >= t_on - pre - 0.1,
                          "%s %d ms: start %.3f s, onset %.3f s, pre-roll %.3f s", name, fm, start,
                          t_on, pre);
                CHECK_MSG(end >= t_off - 0.1 && end <= t_off + p.tail_ms / 1000.0 + fr,
                          "%s %d ms: end %.3f s, speech end %.3f s", name, fm, end, t_off);
                CHECK(sotto_vad_in_speech(v) == 0);
                (void)emit_end;
            }
            /* frame by frame: END is returned within silence_ms + frame */
            sotto_vad_free(v);
            v = sotto_vad_create(&p, NULL);
            size_t L = (size_t)(SR / 1000 * fm);
            double end_emit = -1.0;
            for (size_t pos = 0; pos + L <= n; pos += L) {
                sotto_vad_event ev[4];
                int k = 0;
                sotto_vad_push(v, x + pos, L, ev, 4, &k);
                for (int i = 0; i < k; i++)
                    if (ev[i].type == SOTTO_VAD_SPEECH_END && end_emit < 0)
                        end_emit = (double)(pos + L) / SR;
            }
            double lag = end_emit - (double)off / SR;
            CHECK_MSG(end_emit > 0 && lag <= (p.silence_ms + fm) / 1000.0 + 1e-9 &&
                          lag >= p.silence_ms / 1000.0 - 0.3,
                      "%s %d ms: END returned %.3f s after the end", name, fm, lag);
            sotto_vad_free(v);
            free(x);
        }
}

/* The same audio in 1-, 7-, 4096-sample and random pieces, and with an event
 * buffer of 1: identical events and frame decisions. */
static void test_push_sizes(void) {
    size_t n = 16 * SR;
    float *x = calloc(n, sizeof *x);
    add_noise(x, n, 0.005, 0, 50);
    add_speechlike(x, 2 * SR + 123, 1.5, 0.05);
    add_speechlike(x, 4 * SR + 77, 1.0, 0.05); /* 0.5 s gap: same utterance */
    add_speechlike(x, 8 * SR + 5, 2.0, 0.05);
    add_speechlike(x, 11 * SR, 0.75, 0.05);
    add_speechlike(x, 15 * SR, 1.0, 0.05); /* open at the end: closed by finish */
    static events_t ref;
    static unsigned char dref[800], d[800];
    sotto_vad *v = sotto_vad_create(NULL, NULL);
    run(v, x, n, 4096, 64, 1, &ref);
    for (int i = 0; i < 800; i++) dref[i] = (unsigned char)sotto_vad_frame_decision(v, i);
    sotto_vad_free(v);
    CHECK(well_formed(&ref));
    CHECK_MSG(ref.n == 8, "%d events (want 4 utterances)", ref.n);
    CHECK(ref.n >= 2 && ref.ev[ref.n - 1].sample == n); /* closed by finish at the last sample */
    const size_t chunks[] = {1, 7, 4096, 0, 320, 100000000};
    const int caps[] = {8, 8, 8, 8, 1, 1};
    for (int c = 0; c < 6; c++) {
        v = sotto_vad_create(NULL, NULL);
        run(v, x, n, chunks[c] > n ? n : chunks[c], caps[c], 1, &E);
        for (int i = 0; i < 800; i++) d[i] = (unsigned char)sotto_vad_frame_decision(v, i);
        sotto_vad_free(v);
        int same = E.n == ref.n && E.rc_bad == 0;
        for (int i = 0; same && i < E.n; i++)
            same = E.ev[i].type == ref.ev[i].type && E.ev[i].sample == ref.ev[i].sample;
        CHECK_MSG(same, "chunk %zu cap %d: %d events differ from the 4096-sample run", chunks[c],
                  caps[c], E.n);
        CHECK_MSG(memcmp(d, dref, sizeof d) == 0, "chunk %zu: frame decisions differ", chunks[c]);
    }
    /* cap 0: events are kept and returned later */
    v = sotto_vad_create(NULL, NULL);
    int k = -1;
    CHECK_EQ_INT(sotto_vad_push(v, x, n, NULL, 0, &k), SOTTO_E_RANGE);
    CHECK_EQ_INT(k, 0);
    sotto_vad_event ev[16];
    CHECK_EQ_INT(sotto_vad_push(v, NULL, 0, ev, 2, &k), SOTTO_E_RANGE);
    CHECK_EQ_INT(k, 2);
    CHECK(ev[0].sample == ref.ev[0].sample && ev[1].sample == ref.ev[1].sample);
    CHECK_EQ_INT(sotto_vad_finish(v, ev + 2, 14, &k), SOTTO_OK);
    CHECK_EQ_INT(k, ref.n - 2);
    sotto_vad_free(v);
    free(x);
}

/* finish() closes an open utterance at the last sample; the VAD goes on. */
static void test_finish(void) {
    size_t n = 5 * SR + 111;
    float *x = calloc(n, sizeof *x);
    add_noise(x, n, 0.002, 0, 60);
    add_speechlike(x, 2 * SR, 3.0, 0.05); /* still speaking at the end */
    sotto_vad *v = sotto_vad_create(NULL, NULL);
    sotto_vad_event ev[4];
    int k = 0;
    CHECK_EQ_INT(sotto_vad_push(v, x, n, ev, 4, &k), SOTTO_OK);
    CHECK_EQ_INT(k, 1);
    CHECK(k >= 1 && ev[0].type == SOTTO_VAD_SPEECH_START);
    CHECK_EQ_INT(sotto_vad_in_speech(v), 1);
    CHECK_EQ_INT(sotto_vad_finish(v, ev, 4, &k), SOTTO_OK);
    CHECK_EQ_INT(k, 1);
    CHECK(k == 1 && ev[0].type == SOTTO_VAD_SPEECH_END && ev[0].sample == n);
    CHECK_EQ_INT(sotto_vad_in_speech(v), 0);
    CHECK_EQ_INT(sotto_vad_finish(v, ev, 4, &k), SOTTO_OK); /* nothing open */
    CHECK_EQ_INT(k, 0);
    /* positions stay absolute after finish */
    memset(x, 0, n * sizeof *x);
    add_noise(x, n, 0.002, 0, 61);
    add_speechlike(x, SR, 1.0, 0.05);
    run(v, x, n, 0, 4, 1, &E);
    CHECK_EQ_INT(E.n, 2);
    CHECK(E.n == 2 && E.ev[0].sample > n + SR / 2 && E.ev[1].sample < n + 3 * SR);
    sotto_vad_free(v);
    free(x);
}

/* jfk.wav: one utterance that covers the speech. */
static void test_jfk(void) {
    char dir[4096], path[4200];
    const char *ad = getenv("SOTTO_AUDIO_DIR"), *src = getenv("SOTTO_SOURCE_DIR");
    if (ad)
        snprintf(dir, sizeof dir, "%s", ad);
    else
        snprintf(dir, sizeof dir, "%s/../shared/audio", src ? src : ".");
    snprintf(path, sizeof path, "%s/jfk.wav", dir);
    sotto_audio a;
    sotto_err err;
    int rc = sotto_audio_load_16k(path, &a, &err);
    CHECK_MSG(rc == SOTTO_OK, "cannot load %s (set SOTTO_AUDIO_DIR to the dev audio set): %s", path,
              err.msg);
    if (rc != SOTTO_OK) return;
    /* reference extent: first/last 20 ms frame within 30 dB of the loudest */
    size_t L = 320, nf = a.n / L, first = 0, last = 0;
    double mx = -200.0;
    double *e = malloc(nf * sizeof *e);
    for (size_t f = 0; f < nf; f++) {
        e[f] = 10.0 * log10(power(a.samples + f * L, L) + 1e-12);
        if (e[f] > mx) mx = e[f];
    }
    for (size_t f = 0; f < nf; f++)
        if (e[f] > mx - 30.0) {
            if (!last) first = f * L;
            last = (f + 1) * L;
        }
    free(e);
    /* JFK pauses for up to ~1.3 s between phrases ("... Americans, / ask
     * not ..."): with the default silence_ms (600) that is 5 utterances, so
     * this case uses silence_ms 1500 to expect one. */
    sotto_vad_params p = sotto_vad_default_params();
    p.silence_ms = 1500;
    sotto_vad *v = sotto_vad_create(&p, NULL);
    run(v, a.samples, a.n, 1600, 8, 1, &E);
    CHECK(well_formed(&E));
    CHECK_MSG(E.n == 2, "jfk.wav: %d events (want one utterance)", E.n);
    if (E.n >= 2)
        CHECK_MSG(E.ev[0].sample <= first && E.ev[E.n - 1].sample >= last,
                  "jfk.wav: utterance %.2f..%.2f s, speech %.2f..%.2f s",
                  (double)E.ev[0].sample / SR, (double)E.ev[E.n - 1].sample / SR,
                  (double)first / SR, (double)last / SR);
    sotto_vad_free(v);
    sotto_audio_free(&a);
}

/* The speaker-level gate: speech 25 dB under the speaker's level neither
 * starts an utterance (start_gate_db) nor holds one open (end_gate_db);
 * 10 dB under it does; 20 s after the speaker's last speech the gate lets
 * go (the level window is empty). Energy frames, so no model is needed. */
static int utterances_of(const sotto_vad_params *p, const float *x, size_t n, events_t *e) {
    sotto_vad *v = sotto_vad_create(p, NULL);
    if (!v) return -1;
    run(v, x, n, 0, 8, 1, e);
    sotto_vad_free(v);
    return well_formed(e) ? e->n / 2 : -1;
}

static void test_level_gate(void) {
    const double loud = 0.1, quiet25 = loud / pow(10.0, 25.0 / 20.0), quiet10 = loud / pow(10.0, 10.0 / 20.0);
    sotto_vad_params p = sotto_vad_default_params();
    p.silence_ms = 1000;
    CHECK(p.start_gate_db == 15.0f && p.end_gate_db == 0.0f);
    /* 1: loud 1-4 s, a pause, then a second talker: 25 dB under (6-8 s) */
    size_t n = 10 * SR;
    float *x = calloc(30 * SR, sizeof *x);
    add_speechlike(x, 1 * SR, 3.0, loud);
    add_speechlike(x, 6 * SR, 2.0, quiet25);
    add_noise(x, n, 1e-4, 0, 91);
    CHECK_MSG(utterances_of(&p, x, n, &E) == 1, "25 dB under, gate 15: %d events", E.n);
    sotto_vad_params off = p;
    off.start_gate_db = 0.0f;
    CHECK_MSG(utterances_of(&off, x, n, &E) == 2, "25 dB under, no gate: %d events", E.n);
    /* 10 dB under: the same speaker, farther from the microphone */
    memset(x, 0, sizeof(float) * n);
    add_speechlike(x, 1 * SR, 3.0, loud);
    add_speechlike(x, 6 * SR, 2.0, quiet10);
    add_noise(x, n, 1e-4, 0, 92);
    CHECK_MSG(utterances_of(&p, x, n, &E) == 2, "10 dB under, gate 15: %d events", E.n);
    /* 2: loud 1-4 s and, without a pause, 25 dB under until 7 s */
    memset(x, 0, sizeof(float) * n);
    add_speechlike(x, 1 * SR, 3.0, loud);
    add_speechlike(x, 4 * SR, 3.0, quiet25);
    add_noise(x, n, 1e-4, 0, 93);
    CHECK_MSG(utterances_of(&p, x, n, &E) == 1 && (double)E.ev[1].sample / SR > 6.9,
              "held open: %d events, end %.2f s", E.n, E.n > 1 ? (double)E.ev[1].sample / SR : -1.0);
    sotto_vad_params end = p;
    end.end_gate_db = 20.0f;
    CHECK_MSG(utterances_of(&end, x, n, &E) == 1 && (double)E.ev[1].sample / SR < 4.5,
              "end gate 20: %d events, end %.2f s", E.n, E.n > 1 ? (double)E.ev[1].sample / SR : -1.0);
    /* 3: 22 s after the loud speech, the quiet talker starts an utterance */
    n = 30 * SR;
    memset(x, 0, sizeof(float) * n);
    add_speechlike(x, 1 * SR, 2.0, loud);
    add_speechlike(x, 25 * SR, 2.0, quiet25);
    add_noise(x, n, 1e-4, 0, 94);
    CHECK_MSG(utterances_of(&p, x, n, &E) == 2, "after 22 s: %d events", E.n);
    /* out of range */
    sotto_err err;
    sotto_vad_params bad = p;
    bad.start_gate_db = 61.0f;
    CHECK(sotto_vad_params_check(&bad, &err) == SOTTO_E_INVALID && strstr(err.msg, "start_gate_db"));
    bad = p;
    bad.end_gate_db = -1.0f;
    CHECK(sotto_vad_params_check(&bad, &err) == SOTTO_E_INVALID);
    free(x);
}

int main(void) {
    test_params();
    test_silence();
    test_noise_levels();
    test_noise_jump();
    test_hum_onset();
    test_clicks();
    test_speechlike();
    test_level_gate();
    test_push_sizes();
    test_finish();
    test_jfk();
    return check_report();
}
