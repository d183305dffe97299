/* bench_vad.c - voice activity detection on the English dev clips in noise.
 *
 * Builds one test stream: the English dev clips (<= 61 s; the 70 s
 * concatenation duplicates test-clean clips and the 5.4 min chapter is the
 * babble source, so both are left out) in a seeded random order, 2 s of
 * silence before and after, gaps drawn uniformly from 0.3..3.0 s between
 * them (clip offsets rounded to 60 ms so that VAD frames of 10/20/30 ms line
 * up with each clip's own frames). Noise is added at a given SNR (speech
 * power = mean power of the reference speech frames): white, pink (Kellet
 * filter), hum (50 Hz and 19 harmonics at 1/sqrt(h), plus white 30 dB
 * below), modpink (pink whose level swings by up to +-9 dB over seconds:
 * 6 dB at 0.2 Hz + 3 dB at 0.53 Hz; the SNR is that of the mean power) and
 * babble (6 talkers from the long chapter). For every condition
 * it runs the VAD over the stream in random-sized pushes and over 120 s of
 * the noise alone (a fresh VAD), and prints frame- and utterance-level
 * scores, endpoint timing and speed. See print_definitions() for the
 * reference labelling and how the numbers are counted.
 *
 * usage: bench_vad [--audio-dir DIR] [--seed N] [--cond c1,c2,...]
 *                  [--threshold DB] [--min-speech MS] [--silence MS]
 *                  [--preroll MS] [--tail MS] [--frame MS] [--noise-secs S]
 * The audio directory defaults to $SOTTO_AUDIO_DIR, else
 * $SOTTO_SOURCE_DIR/../shared/audio, else ../shared/audio.
 * Exit status: 0, or 1 on any error (missing files, VAD errors, events out
 * of order).
 */
#define _POSIX_C_SOURCE 200809L
#include "audio.h"
#include "vad.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifndef M_PI
#define M_PI 3.14159265358979323846
#endif

#define SR 16000
#define ALIGN 960 /* 60 ms: a multiple of every frame size */
#define MAX_CLIPS 64
#define REF_BELOW_ACTIVE_DB 30.0
#define REF_ABOVE_BG_DB 6.0

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

typedef struct {
    char id[128];
    sotto_audio a;
    size_t off;              /* stream offset */
    size_t ref_s, ref_e;     /* reference speech range in the stream (samples) */
    double active_db, bg_db; /* clip levels */
} clip_t;

typedef struct {
    size_t s, e;           /* utterance [s, e) */
    size_t emit_s, emit_e; /* stream position when START / END were returned */
} utt_t;

typedef struct {
    utt_t *u;
    size_t n, cap;
    unsigned char *dec; /* raw frame decisions */
    size_t n_frames;
    double secs; /* VAD time */
    int bad;
} run_t;

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}
static double pct(double *v, size_t n, double p) {
    if (n == 0) return NAN;
    qsort(v, n, sizeof *v, cmp_double);
    double idx = p / 100.0 * (double)(n - 1);
    size_t i = (size_t)idx;
    if (i + 1 >= n) return v[n - 1];
    return v[i] + (idx - (double)i) * (v[i + 1] - v[i]);
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Runs the VAD over x in seeded random push sizes (1..4096). */
static int run_vad(const sotto_vad_params *p, const float *x, size_t n, uint64_t seed, run_t *r) {
    memset(r, 0, sizeof *r);
    sotto_err err;
    sotto_vad *v = sotto_vad_create(p, &err);
    if (!v) {
        fprintf(stderr, "bench_vad: %s\n", err.msg);
        return 1;
    }
    size_t L = (size_t)(SR / 1000 * p->frame_ms);
    r->n_frames = n / L;
    r->dec = calloc(r->n_frames + 1, 1);
    rng_t rng = {seed * 0x9E3779B97F4A7C15ULL + 1};
    size_t pos = 0, fr_read = 0;
    int open = 0;
    double t = 0.0;
    while (pos <= n) {
        size_t m = 1 + (size_t)(rng_u64(&rng) % 4096);
        if (m > n - pos) m = n - pos;
        sotto_vad_event ev[8];
        int nev = 0, rc;
        double t0 = now_s();
        if (m > 0)
            rc = sotto_vad_push(v, x + pos, m, ev, 8, &nev);
        else
            rc = sotto_vad_finish(v, ev, 8, &nev);
        t += now_s() - t0;
        if (rc != SOTTO_OK) {
            fprintf(stderr, "bench_vad: push/finish returned %d\n", rc);
            r->bad = 1;
            break;
        }
        pos += m;
        size_t fr_now = pos / L;
        for (; fr_read < fr_now && fr_read < r->n_frames; fr_read++) {
            int d = sotto_vad_frame_decision(v, fr_read);
            if (d < 0) {
                fprintf(stderr, "bench_vad: frame decision %zu lost\n", fr_read);
                r->bad = 1;
            }
            r->dec[fr_read] = d > 0;
        }
        for (int i = 0; i < nev; i++) {
            if (ev[i].type == SOTTO_VAD_SPEECH_START) {
                if (open || (r->n && ev[i].sample < r->u[r->n - 1].e) || ev[i].sample > pos) {
                    fprintf(stderr, "bench_vad: START at %llu out of order\n",
                            (unsigned long long)ev[i].sample);
                    r->bad = 1;
                }
                if (r->n == r->cap) {
                    r->cap = r->cap ? 2 * r->cap : 64;
                    r->u = realloc(r->u, r->cap * sizeof *r->u);
                }
                r->u[r->n].s = ev[i].sample;
                r->u[r->n].emit_s = pos;
                open = 1;
            } else {
                if (!open || ev[i].sample <= r->u[r->n].s || ev[i].sample > pos) {
                    fprintf(stderr, "bench_vad: END at %llu out of order\n",
                            (unsigned long long)ev[i].sample);
                    r->bad = 1;
                    continue;
                }
                r->u[r->n].e = ev[i].sample;
                r->u[r->n].emit_e = pos;
                r->n++;
                open = 0;
            }
        }
        if (m == 0) break;
    }
    if (open) {
        fprintf(stderr, "bench_vad: utterance left open after finish\n");
        r->bad = 1;
    }
    r->secs = t;
    sotto_vad_free(v);
    return r->bad;
}

/* Reference speech frames of one clip (frames of L samples from its start):
 * energy >= active - REF_BELOW_ACTIVE_DB and >= background + REF_ABOVE_BG_DB. */
static void clip_reference(clip_t *c, size_t L, unsigned char *lab, size_t nf) {
    double *e = malloc(nf * sizeof *e), *tmp = malloc(nf * sizeof *tmp);
    for (size_t f = 0; f < nf; f++) {
        double s = 0.0;
        for (size_t i = 0; i < L; i++)
            s += (double)c->a.samples[f * L + i] * c->a.samples[f * L + i];
        e[f] = 10.0 * log10(s / (double)L + 1e-12);
    }
    memcpy(tmp, e, nf * sizeof *e);
    c->active_db = pct(tmp, nf, 95.0);
    c->bg_db = pct(tmp, nf, 5.0);
    double thr = c->active_db - REF_BELOW_ACTIVE_DB;
    if (c->bg_db + REF_ABOVE_BG_DB > thr) thr = c->bg_db + REF_ABOVE_BG_DB;
    for (size_t f = 0; f < nf; f++) lab[f] = e[f] >= thr;
    free(e);
    free(tmp);
}

static void make_noise(const char *type, float *out, size_t n, uint64_t seed,
                       const clip_t *babble_src) {
    rng_t r = {seed * 0xD1B54A32D192ED03ULL + 7};
    if (!strcmp(type, "white")) {
        for (size_t i = 0; i < n; i++) out[i] = (float)rng_gauss(&r);
    } else if (!strcmp(type, "pink")) {
        double b0 = 0, b1 = 0, b2 = 0, b3 = 0, b4 = 0, b5 = 0, b6 = 0;
        for (size_t i = 0; i < n; i++) {
            double w = rng_gauss(&r);
            b0 = 0.99886 * b0 + w * 0.0555179;
            b1 = 0.99332 * b1 + w * 0.0750759;
            b2 = 0.96900 * b2 + w * 0.1538520;
            b3 = 0.86650 * b3 + w * 0.3104856;
            b4 = 0.55000 * b4 + w * 0.5329522;
            b5 = -0.7616 * b5 - w * 0.0168980;
            out[i] = (float)(b0 + b1 + b2 + b3 + b4 + b5 + b6 + w * 0.5362);
            b6 = w * 0.115926;
        }
    } else if (!strcmp(type, "modpink")) { /* pink, level swinging +-9 dB over seconds */
        make_noise("pink", out, n, seed, babble_src);
        double p1 = 2.0 * M_PI * rng_unif(&r), p2 = 2.0 * M_PI * rng_unif(&r);
        for (size_t i = 0; i < n; i++) {
            double t = (double)i / SR;
            double db =
                6.0 * sin(2.0 * M_PI * 0.2 * t + p1) + 3.0 * sin(2.0 * M_PI * 0.53 * t + p2);
            out[i] *= (float)pow(10.0, db / 20.0);
        }
    } else if (!strcmp(type, "hum")) {
        double ph[20];
        for (int h = 0; h < 20; h++) ph[h] = 2.0 * M_PI * rng_unif(&r);
        for (size_t i = 0; i < n; i++) {
            double s = 0.0;
            for (int h = 1; h <= 20; h++)
                s += sin(2.0 * M_PI * 50.0 * h * (double)i / SR + ph[h - 1]) / sqrt((double)h);
            out[i] = (float)(s + 0.05 * rng_gauss(&r));
        }
    } else { /* babble: 6 talkers from the long chapter at random offsets */
        memset(out, 0, n * sizeof *out);
        size_t m = babble_src->a.n;
        for (int t = 0; t < 6; t++) {
            size_t o = (size_t)(rng_u64(&r) % m);
            for (size_t i = 0; i < n; i++) out[i] += babble_src->a.samples[(o + i) % m];
        }
    }
    double p = 0.0;
    for (size_t i = 0; i < n; i++) p += (double)out[i] * out[i];
    p /= (double)n;
    float g = (float)(1.0 / sqrt(p > 0 ? p : 1.0));
    for (size_t i = 0; i < n; i++) out[i] *= g;
}

static void print_definitions(double noise_secs) {
    printf("Reference labels: a VAD frame inside a clip is speech when its clean-signal\n"
           "  energy is >= the clip's active level - %.0f dB (active level = 95th percentile\n"
           "  of the clip's frame energies) and >= its background + %.0f dB (background =\n"
           "  5th percentile). A clip's reference range runs from its first to the end of\n"
           "  its last speech frame.\n",
           REF_BELOW_ACTIVE_DB, REF_ABOVE_BG_DB);
    fputs("frame P/R/F1: raw per-frame VAD decisions vs reference frames (whole stream).\n"
          "span P/R/F1: frames inside reported utterances [start, end) vs reference frames\n"
          "  (pre-roll, tail and pauses inside utterances count against precision).\n"
          "Utterances vs clips: an utterance belongs to every clip whose reference range\n"
          "  it overlaps. missed = clips with no utterance; splits = extra utterances in\n"
          "  one clip (clips have internal pauses longer than silence_ms: each split counts\n"
          "  here, not as false); merges = gaps between clips bridged by one utterance\n"
          "  (gaps < silence_ms do that by design; bridged starts/ends are not timed);\n"
          "  false = utterances overlapping no reference range, per minute of non-speech.\n"
          "start err = utterance start - reference start (negative: onset covered; nominal\n"
          "  -preroll); clipped = starts after the reference start. end err = utterance\n"
          "  end - reference end (nominal +tail); cut = ends before it. START/END latency =\n"
          "  stream position when the event was returned - reference start/end (END:\n"
          "  ~silence_ms). Percentiles over clips.\n",
          stdout);
    printf("noise-only: a fresh VAD on %.0f s of the condition's noise alone, same level:\n"
           "  false utterances per minute and %% of frames called speech.\n"
           "xRT: audio seconds processed per second of VAD time (one core).\n",
           noise_secs);
}

static void usage(void) {
    fprintf(stderr,
            "usage: bench_vad [--audio-dir DIR] [--seed N] [--cond c1,c2,...] [--threshold DB]\n"
            "                 [--min-speech MS] [--silence MS] [--preroll MS] [--tail MS]\n"
            "                 [--frame MS] [--noise-secs S]\n"
            "conditions: clean, white:SNR, pink:SNR, hum:SNR, modpink:SNR, babble:SNR\n");
}

int main(int argc, char **argv) {
    sotto_vad_params p = sotto_vad_default_params();
    uint64_t seed = 1;
    const char *dir = NULL;
    const char *conds = "clean,white:20,white:10,white:5,pink:20,pink:10,pink:5,hum:20,hum:10,"
                        "hum:5,modpink:10,babble:20,babble:10";
    double noise_secs = 120.0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (!val) {
            usage();
            return 1;
        }
        if (!strcmp(a, "--audio-dir"))
            dir = val;
        else if (!strcmp(a, "--seed"))
            seed = strtoull(val, NULL, 10);
        else if (!strcmp(a, "--cond"))
            conds = val;
        else if (!strcmp(a, "--threshold"))
            p.threshold_db = strtof(val, NULL);
        else if (!strcmp(a, "--min-speech"))
            p.min_speech_ms = atoi(val);
        else if (!strcmp(a, "--silence"))
            p.silence_ms = atoi(val);
        else if (!strcmp(a, "--preroll"))
            p.preroll_ms = atoi(val);
        else if (!strcmp(a, "--tail"))
            p.tail_ms = atoi(val);
        else if (!strcmp(a, "--frame"))
            p.frame_ms = atoi(val);
        else if (!strcmp(a, "--noise-secs"))
            noise_secs = atof(val);
        else {
            usage();
            return 1;
        }
        i++;
    }
    sotto_err err;
    if (sotto_vad_params_check(&p, &err) != SOTTO_OK) {
        fprintf(stderr, "bench_vad: %s\n", err.msg);
        return 1;
    }
    char dirbuf[4096];
    if (!dir) dir = getenv("SOTTO_AUDIO_DIR");
    if (!dir) {
        const char *src = getenv("SOTTO_SOURCE_DIR");
        snprintf(dirbuf, sizeof dirbuf, "%s/../shared/audio", src ? src : ".");
        dir = dirbuf;
    }
    char path[4600];
    snprintf(path, sizeof path, "%s/manifest.tsv", dir);
    FILE *mf = fopen(path, "r");
    if (!mf) {
        fprintf(stderr, "bench_vad: cannot open %s (set SOTTO_AUDIO_DIR or --audio-dir)\n", path);
        return 1;
    }
    static clip_t clips[MAX_CLIPS];
    clip_t babble;
    memset(&babble, 0, sizeof babble);
    int nc = 0, errors = 0;
    char line[16384];
    int lineno = 0;
    while (fgets(line, sizeof line, mf)) {
        if (lineno++ == 0) continue;
        char *f[4] = {0};
        char *s = line;
        for (int k = 0; k < 4 && s; k++) {
            f[k] = s;
            s = strchr(s, '\t');
            if (s) *s++ = '\0';
        }
        if (!f[3] || strcmp(f[3], "en") != 0) continue;
        double secs = atof(f[2]);
        clip_t *c;
        if (!strncmp(f[0], "long_", 5))
            c = &babble;
        else if (strstr(f[0], "concat") || secs > 61.0)
            continue;
        else if (nc < MAX_CLIPS)
            c = &clips[nc++];
        else
            continue;
        snprintf(c->id, sizeof c->id, "%.*s", (int)sizeof c->id - 1, f[0]);
        snprintf(path, sizeof path, "%s/%s", dir, f[1]);
        if (sotto_audio_load_16k(path, &c->a, &err) != SOTTO_OK) {
            fprintf(stderr, "bench_vad: %s\n", err.msg);
            errors++;
        }
    }
    fclose(mf);
    if (errors || nc == 0 || !babble.a.samples) {
        fprintf(stderr, "bench_vad: %d load errors, %d clips, babble source %s\n", errors, nc,
                babble.a.samples ? "ok" : "missing");
        return 1;
    }
    /* layout */
    rng_t rng = {seed * 0x2545F4914F6CDD1DULL + 3};
    for (int i = nc - 1; i > 0; i--) {
        int j = (int)(rng_u64(&rng) % (uint64_t)(i + 1));
        clip_t t = clips[i];
        clips[i] = clips[j];
        clips[j] = t;
    }
    size_t pos = 2 * SR, gap_min = SIZE_MAX, gap_max = 0;
    for (int c = 0; c < nc; c++) {
        clips[c].off = pos;
        pos += (clips[c].a.n + ALIGN - 1) / ALIGN * ALIGN;
        size_t gap = (size_t)((0.3 + 2.7 * rng_unif(&rng)) * SR) / ALIGN * ALIGN;
        if (c == nc - 1)
            gap = 2 * SR;
        else {
            if (gap < gap_min) gap_min = gap;
            if (gap > gap_max) gap_max = gap;
        }
        pos += gap;
    }
    size_t n = pos, L = (size_t)(SR / 1000 * p.frame_ms), nf = n / L;
    float *clean = calloc(n, sizeof *clean), *noisy = malloc(n * sizeof *noisy);
    float *noise = malloc(n * sizeof *noise);
    unsigned char *ref = calloc(nf, 1), *seg = malloc(nf);
    size_t nns = (size_t)(noise_secs * SR);
    float *pure = malloc((nns ? nns : 1) * sizeof *pure);
    double sp_pow = 0.0, speech_secs = 0.0, clip_secs = 0.0;
    size_t sp_frames = 0;
    for (int c = 0; c < nc; c++) {
        clip_t *cl = &clips[c];
        memcpy(clean + cl->off, cl->a.samples, cl->a.n * sizeof *clean);
        clip_secs += (double)cl->a.n / SR;
        size_t cf = cl->a.n / L, f0 = cl->off / L;
        clip_reference(cl, L, ref + f0, cf);
        cl->ref_s = cl->ref_e = 0;
        for (size_t f = 0; f < cf; f++)
            if (ref[f0 + f]) {
                if (cl->ref_e == 0) cl->ref_s = (f0 + f) * L;
                cl->ref_e = (f0 + f + 1) * L;
                double e = 0.0;
                for (size_t i = 0; i < L; i++)
                    e += (double)clean[(f0 + f) * L + i] * clean[(f0 + f) * L + i];
                sp_pow += e / (double)L;
                sp_frames++;
            }
        speech_secs += (double)(cl->ref_e - cl->ref_s) / SR;
    }
    sp_pow /= (double)(sp_frames ? sp_frames : 1);

    printf("bench_vad: %d English dev clips (%.1f s, reference ranges %.1f s, %zu reference speech "
           "frames = %.1f s) from %s\n",
           nc, clip_secs, speech_secs, sp_frames, (double)sp_frames * (double)L / SR, dir);
    printf("stream %.1f s: seed %llu, 2 s lead/trail silence, %d gaps %.2f..%.2f s (uniform "
           "0.3..3.0 s,\n"
           "  60 ms grid); speech level %.1f dBFS (mean power of reference frames)\n",
           (double)n / SR, (unsigned long long)seed, nc - 1, (double)gap_min / SR,
           (double)gap_max / SR, 10.0 * log10(sp_pow));
    printf(
        "params: frame_ms %d, threshold_db %.1f, min_speech_ms %d, silence_ms %d, preroll_ms %d, "
        "tail_ms %d; pushes of 1..4096 samples (seeded)\n",
        p.frame_ms, (double)p.threshold_db, p.min_speech_ms, p.silence_ms, p.preroll_ms, p.tail_ms);
    printf("clips in stream order (manifest id, prefix librispeech_ dropped):");
    for (int c = 0, col = 80; c < nc; c++) {
        const char *id = clips[c].id;
        if (!strncmp(id, "librispeech_", 12)) id += 12;
        if (col + (int)strlen(id) + 1 > 78) {
            printf("\n ");
            col = 1;
        }
        col += printf(" %s", id);
    }
    printf("\n");
    print_definitions(noise_secs);
    printf("\n%-10s | %5s %5s %5s | %5s %5s %5s | %6s %6s %6s | %9s | %9s %7s | %6s\n", "condition",
           "frmP", "frmR", "frmF1", "spnP", "spnR", "spnF1", "missed", "splits", "merges",
           "false/min", "noise f/m", "noise%", "xRT");
    char timing[64][256];
    int nt = 0;
    char cbuf[1024];
    snprintf(cbuf, sizeof cbuf, "%s", conds);
    double *st = malloc((size_t)nc * sizeof *st), *en = malloc((size_t)nc * sizeof *en);
    double *sl = malloc((size_t)nc * sizeof *sl), *el = malloc((size_t)nc * sizeof *el);
    for (char *tok = strtok(cbuf, ","); tok; tok = strtok(NULL, ",")) {
        uint64_t ci =
            1469598103934665603ULL; /* FNV-1a of the condition: stable noise per condition */
        for (const char *q = tok; *q; q++) ci = (ci ^ (unsigned char)*q) * 1099511628211ULL;
        char type[32];
        double snr = INFINITY;
        const char *colon = strchr(tok, ':');
        snprintf(type, sizeof type, "%.*s", colon ? (int)(colon - tok) : (int)strlen(tok), tok);
        if (colon) snr = atof(colon + 1);
        int is_clean = !strcmp(type, "clean");
        if (!is_clean && strcmp(type, "white") && strcmp(type, "pink") && strcmp(type, "hum") &&
            strcmp(type, "babble") && strcmp(type, "modpink")) {
            fprintf(stderr, "bench_vad: unknown condition %s\n", tok);
            return 1;
        }
        float g = 0.0f;
        if (!is_clean) {
            make_noise(type, noise, n, seed + 100 + ci, &babble);
            g = (float)sqrt(sp_pow / pow(10.0, snr / 10.0));
        }
        for (size_t i = 0; i < n; i++) noisy[i] = clean[i] + (is_clean ? 0.0f : g * noise[i]);
        run_t r, rn;
        errors += run_vad(&p, noisy, n, seed + ci, &r);
        if (!is_clean) {
            make_noise(type, pure, nns, seed + 1000 + ci, &babble);
            for (size_t i = 0; i < nns; i++) pure[i] *= g;
        } else {
            memset(pure, 0, nns * sizeof *pure);
        }
        errors += run_vad(&p, pure, nns, seed + 2000 + ci, &rn);
        /* frame scores */
        memset(seg, 0, nf);
        for (size_t u = 0; u < r.n; u++)
            for (size_t f = r.u[u].s / L; f < nf && f * L + L / 2 < r.u[u].e; f++)
                if (f * L + L / 2 >= r.u[u].s) seg[f] = 1;
        size_t tp = 0, fp = 0, fn = 0, stp = 0, sfp = 0, sfn = 0;
        for (size_t f = 0; f < nf; f++) {
            int d = f < r.n_frames ? r.dec[f] : 0;
            tp += d && ref[f];
            fp += d && !ref[f];
            fn += !d && ref[f];
            stp += seg[f] && ref[f];
            sfp += seg[f] && !ref[f];
            sfn += !seg[f] && ref[f];
        }
        double P = tp ? (double)tp / (double)(tp + fp) : 0, R = (double)tp / (double)(tp + fn);
        double sP = stp ? (double)stp / (double)(stp + sfp) : 0,
               sR = (double)stp / (double)(stp + sfn);
        /* utterances vs clips (clips are in stream order) */
        int missed = 0, splits = 0, merges = 0, clipped = 0, cut = 0;
        size_t ns = 0, ne = 0;
        for (int c = 0; c < nc; c++) {
            clip_t *cl = &clips[c];
            long i0 = -1, i1 = -1;
            for (size_t u = 0; u < r.n; u++)
                if (r.u[u].s < cl->ref_e && r.u[u].e > cl->ref_s) {
                    if (i0 < 0) i0 = (long)u;
                    i1 = (long)u;
                }
            if (i0 < 0) {
                missed++;
                continue;
            }
            splits += (int)(i1 - i0);
            const utt_t *a = &r.u[i0], *b = &r.u[i1];
            if (c > 0 && a->s < clips[c - 1].ref_e && a->e > clips[c - 1].ref_s) {
                /* start bridged from the previous clip: counted there */
            } else {
                st[ns] = ((double)a->s - (double)cl->ref_s) * 1000.0 / SR;
                sl[ns] = ((double)a->emit_s - (double)cl->ref_s) * 1000.0 / SR;
                clipped += a->s > cl->ref_s;
                ns++;
            }
            if (c + 1 < nc && b->s < clips[c + 1].ref_e && b->e > clips[c + 1].ref_s) {
                merges++;
            } else {
                en[ne] = ((double)b->e - (double)cl->ref_e) * 1000.0 / SR;
                el[ne] = ((double)b->emit_e - (double)cl->ref_e) * 1000.0 / SR;
                cut += b->e < cl->ref_e;
                ne++;
            }
        }
        int n_false = 0;
        for (size_t u = 0; u < r.n; u++) {
            int hit = 0;
            for (int c = 0; c < nc && !hit; c++)
                hit = r.u[u].s < clips[c].ref_e && r.u[u].e > clips[c].ref_s;
            n_false += !hit;
        }
        double nonspeech_min = ((double)n / SR - speech_secs) / 60.0;
        size_t nfd = 0;
        for (size_t f = 0; f < rn.n_frames; f++) nfd += rn.dec[f];
        double xrt = ((double)n + (double)nns) / SR / (r.secs + rn.secs);
        printf(
            "%-10s | %5.3f %5.3f %5.3f | %5.3f %5.3f %5.3f | %6d %6d %6d | %9.2f | %9.2f %6.2f%% | "
            "%6.0f\n",
            tok, P, R, P + R > 0 ? 2 * P * R / (P + R) : 0.0, sP, sR,
            sP + sR > 0 ? 2 * sP * sR / (sP + sR) : 0.0, missed, splits, merges,
            (double)n_false / nonspeech_min, nns ? (double)rn.n / (noise_secs / 60.0) : 0.0,
            rn.n_frames ? 100.0 * (double)nfd / (double)rn.n_frames : 0.0, xrt);
        if (nt < 64) {
            double s50 = pct(st, ns, 50), s5 = pct(st, ns, 5), s95 = pct(st, ns, 95);
            double e50 = pct(en, ne, 50), e5 = pct(en, ne, 5), e95 = pct(en, ne, 95);
            double l50 = pct(sl, ns, 50), l95 = pct(sl, ns, 95);
            double m50 = pct(el, ne, 50), m95 = pct(el, ne, 95);
            snprintf(timing[nt++], sizeof timing[0],
                     "%-10s | %6.0f %6.0f %6.0f | %3d/%-3zu | %6.0f %6.0f %6.0f | %3d/%-3zu | "
                     "%6.0f %6.0f "
                     "| %6.0f %6.0f",
                     tok, s50, s5, s95, clipped, ns, e50, e5, e95, cut, ne, l50, l95, m50, m95);
        }
        free(r.u);
        free(r.dec);
        free(rn.u);
        free(rn.dec);
    }
    printf("\nEndpoint timing (ms; over clips whose start/end is not bridged)\n");
    printf("%-10s | %6s %6s %6s | %7s | %6s %6s %6s | %7s | %13s | %13s\n", "condition", "st50",
           "st5", "st95", "clipped", "end50", "end5", "end95", "cut", "START lat 50/95",
           "END lat 50/95");
    for (int i = 0; i < nt; i++) printf("%s\n", timing[i]);
    for (int c = 0; c < nc; c++) sotto_audio_free(&clips[c].a);
    sotto_audio_free(&babble.a);
    free(clean);
    free(noisy);
    free(noise);
    free(pure);
    free(ref);
    free(seg);
    free(st);
    free(en);
    free(sl);
    free(el);
    if (errors) fprintf(stderr, "bench_vad: %d errors\n", errors);
    return errors ? 1 : 0;
}
