/* vad.c - voice activity detection with an adaptive per-band noise floor
 * and an endpointer (see vad.h). Constants tuned with bench/bench_vad.c.
 *
 * Per frame (frame_ms of 16 kHz audio, Hann window, FFT zero-padded to a
 * power of two):
 *   1. Band powers P_k in 18 bands from 125 Hz to 7.5 kHz (125 Hz wide up
 *      to 1 kHz, wider above), scaled so that sum_k P_k is the frame's mean
 *      square in that range (0 dB = full-scale DC).
 *   2. Score: the noise-whitened energy of this and the previous frame,
 *          g_k = (P_k + P'_k) / (2 N_k),   score_db = 10 log10(mean_k g_k),
 *      i.e. how far the audio is above the noise floor once every band is
 *      divided by its own noise power N_k. Stationary noise alone gives
 *      0 +- 0.5 dB (99.9% of frames below 1.8 dB) whatever its colour
 *      (white, pink, hum); speech lifts the bands it dominates, and those
 *      dominate the linear mean.
 *   3. Decision: speech when score_db > threshold_db (threshold_db - HYST_DB
 *      inside an utterance) and the frame is above GATE_DBFS (dither and
 *      near-digital silence are never speech), unless vetoed by 5.
 *   4. Noise floor N_k, updated after the decision (an onset is judged
 *      against the floor before it), MCRA-style: S_k = P_k smoothed over
 *      TC_SMOOTH_MS; Smin_k = minimum of S_k over the last MINWIN_MS
 *      (minimum statistics in MINWIN_SUB sub-windows); band k holds speech
 *      while S_k > Smin_k + DELTA_DB, and its smoothed speech presence p_k
 *      slows the recursive average N_k <- a N_k + (1-a) P_k, a = ad +
 *      (1-ad) p_k (ad from TC_NOISE_MS); N_k <= Smin_k + CLAMP_DB, so after
 *      a 20 dB fall of the noise the floor drops 10 dB within ~0.1 s and the
 *      rest within ~1.8 s (a too-high floor only costs sensitivity).
 *   5. Level changes: let std = the standard deviation over bands of
 *      10 log10 g_k. Noise whose level changed keeps its spectral shape:
 *      std ~2 dB (the statistical spread of the band powers), while speech
 *      above the floor has its own shape: on the dev clips in white and
 *      pink noise, std >= 3.5 dB in > 99% of frames with score > 6 dB, and
 *      >= 2.5 dB in ~99% of those with score > 2.5 dB. So frames with
 *      score > VETO_DB and std < FLAT_HOLD_DB are not speech, and after
 *      FLAT_FRAMES "flat" frames in a row (that, or score > FLAT_MIN_DB
 *      with std < FLAT_DB) the floor moves to P_k with TC_FLAT_MS and the
 *      minimum statistics are lifted with it; after a step (> VETO_DB) it
 *      keeps following for up to FOLLOW_MS on the looser std test. A sudden
 *      +20 dB step of stationary noise is absorbed in 0.1-0.3 s, a level
 *      swinging by 10-17 dB/s is followed.
 *   6. Steady level: when the score has stayed above threshold - HYST_DB
 *      for STAT_MS with a std over time under STAT_STD_DB (syllabic speech
 *      moves by many dB at 3-8 Hz), the floor is set to P_k averaged over
 *      TC_MEAN_MS. This catches new steady sounds whose spectral shape
 *      differs from the old noise (hum switching on).
 * Endpointer: SPEECH_START when the current frame is speech, at least
 * R = ceil(min_speech_ms / frame_ms) + 3 of the last 2R frames are, and
 * they include a run of RUN_FRAMES in a row. A sound shorter than
 * min_speech_ms gives at most R - 1 speech frames (it can straddle one more
 * frame than its length, and the score spans two frames), so it never
 * starts an utterance; keystrokes (a frame or two each, with gaps) never
 * make a run. The start is the first speech frame of the window minus the
 * pre-roll, but not before the previous end. SPEECH_END after silence_ms
 * of non-speech frames; its sample is the end of the last speech frame +
 * tail_ms, not past the current position. Events wait in a queue of QUEUE;
 * a START is only made with room for it and its END.
 *
 * Speaker-level gate (both kinds, between the frame decision and the
 * endpointer): a ring of the speech frames of the last LVL_WINDOW_MS with a
 * histogram of their power in 0.5 dB bins gives the speaker's level (the
 * LVL_PCT percentile). A speech frame more than start_gate_db under it
 * cannot start an utterance, more than end_gate_db under it does not hold
 * one open; a frame the gate turns away is not added to the ring, so
 * background speech does not pull the level down. Measured on the dev
 * clips (bench/vad_gate.py, Silero): 8-talker babble at 20 dB SNR in the
 * pauses lies more than 15 dB under the level in 98% of the chunks the
 * network calls speech, the clips' own speech in 30% (quiet phonemes, which
 * seldom make 3 chunks in a row, and are inside an utterance anyway).
 *
 * SOTTO_VAD_SILERO: the frames are 512-sample chunks classified by
 * vad_neural.c (Silero probabilities with hysteresis); steps 1-6 do not
 * run, and the endpointer takes R = max(1, ceil(min_speech_ms / 32 ms))
 * with a window and a run of R: START when the last R chunks are speech
 * (the network already integrates over time, so no margin is added).
 */
#include "vad.h"
#include "vad_neural.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#ifndef M_PI
#define M_PI 3.14159265358979323846
#endif

/* Internal constants, tuned on bench/bench_vad.c. */
#define VAD_SR 16000
#define HYST_DB 1.0f         /* threshold lowered by this inside an utterance */
#define GATE_DBFS (-70.0f)   /* frames quieter than this are never speech */
#define TC_SMOOTH_MS 60.0f   /* smoothing of P for minimum statistics */
#define MINWIN_MS 1000       /* minimum-statistics window */
#define MINWIN_SUB 5         /* ... in this many sub-windows */
#define DELTA_DB 4.0f        /* band speech-presence: S above Smin by this */
#define TC_PRESENCE_MS 30.0f /* smoothing of the band speech presence */
#define TC_NOISE_MS 600.0f   /* recursive noise average */
#define CLAMP_DB 10.0f       /* N <= Smin + CLAMP_DB */
#define TC_MEAN_MS 150.0f    /* smoothing of P used by the steady-level rule */
#define STAT_MS 500          /* steady-level window */
#define STAT_STD_DB 1.0f     /* ... and the largest std of score_db in it */
#define EPS_POW 1e-14f       /* smallest band power */
#define FLAT_DB 2.5f         /* whitened spectrum "flat": std of band SNRs (dB) below this */
#define FLAT_FRAMES 3        /* flat, elevated frames in a row before the floor follows */
#define TC_FLAT_MS 100.0f    /* ... with this time constant */
#define FLAT_MIN_DB 1.0f     /* ... and at least this far above the floor */
#define FLAT_HOLD_DB 3.5f    /* after a step (> VETO_DB), follow while the std is below this */
#define FOLLOW_MS 400        /* ... for at most this long */
#define FLAT_LIFT 0.5f       /* minimum statistics lifted to this x N while following */
#define RUN_FRAMES 4         /* START needs a run of this many speech frames (not clicks) */
#define VETO_DB 6.0f         /* flat frames this far above the floor are not speech */

/* The speaker-level gate (vad.h: start_gate_db, end_gate_db). */
#define LVL_WINDOW_MS 20000 /* speech frames of this long ago and later give the level */
#define LVL_MIN_MS 500      /* ... once they add up to this much speech */
#define LVL_PCT 0.9         /* the level: this percentile of their power */
#define LVL_FLOOR_DB (-120.0f)
#define LVL_BINS 240 /* 0.5 dB bins from LVL_FLOOR_DB to 0 dBFS */
#define LVL_RING (LVL_WINDOW_MS / 10) /* one entry per frame; frames are >= 10 ms */

#define MAX_FRAME 512 /* 480 for ENERGY (30 ms), 512 for SILERO */
#define MAX_FFT 512
#define MAX_BANDS 24
#define MAX_STAT (STAT_MS / 10)
#define HIST 4096
#define QUEUE 64

static const float band_edges_hz[] = {125,  250,  375,  500,  625,  750,  875,  1000, 1250, 1500,
                                      1750, 2000, 2500, 3000, 3500, 4000, 5000, 6000, 7500};
#define N_EDGES ((int)(sizeof band_edges_hz / sizeof band_edges_hz[0]))

struct sotto_vad {
    sotto_vad_params p;
    sotto_vad_neural *nn; /* SOTTO_VAD_SILERO */
    int L, nfft, nb;
    int band_lo[MAX_BANDS], band_hi[MAX_BANDS];
    float pw_scale, gate;
    float win[MAX_FRAME];
    float tw_re[MAX_FFT / 2], tw_im[MAX_FFT / 2];
    float re[MAX_FFT], im[MAX_FFT];
    float frame[MAX_FRAME];
    int fill;
    /* noise tracking */
    int started;
    float a_s, a_p, a_d, a_m;
    float S[MAX_BANDS], Smin[MAX_BANDS], cur_min[MAX_BANDS], sub_min[MINWIN_SUB][MAX_BANDS];
    float pres[MAX_BANDS], N[MAX_BANDS], M[MAX_BANDS];
    float Pprev[MAX_BANDS]; /* band powers of the previous frame */
    int flat_run, follow, follow_frames;
    float a_f;
    int sub_len, sub_count, sub_idx;
    float stat[MAX_STAT];
    int stat_len, stat_n, stat_pos;
    float delta, clamp;
    /* endpointer */
    int min_speech_frames, silence_frames, onset_frames, onset_count, run, run_frames;
    uint64_t run_ok; /* last frame (+1) that ended a run of RUN_FRAMES speech frames */
    uint64_t frames, samples;
    int in_speech;
    int sil_frames;
    uint64_t last_speech_end, last_end;
    uint8_t dec[HIST];
    /* speaker level: the speech frames of the last LVL_WINDOW_MS (a ring in
       frame order) and a histogram of their power */
    uint64_t lvl_frame[LVL_RING];
    int16_t lvl_bin[LVL_RING];
    int lvl_head, lvl_n, lvl_window, lvl_min;
    int lvl_hist[LVL_BINS];
    sotto_vad_event q[QUEUE];
    int q_head, q_n;
};

sotto_vad_params sotto_vad_default_params(void) {
    sotto_vad_params p;
    p.frame_ms = 20;
    p.threshold_db = 2.5f;
    p.min_speech_ms = 80;
    p.silence_ms = 600;
    p.preroll_ms = 300;
    p.tail_ms = 300;
    p.kind = SOTTO_VAD_ENERGY;
    p.speech_threshold = 0.5f;
    p.neg_threshold = 0.35f;
    p.silero = NULL;
    p.start_gate_db = 15.0f;
    p.end_gate_db = 0.0f;
    return p;
}

int sotto_vad_params_check(const sotto_vad_params *p, sotto_err *err) {
    if (!p) return sotto_err_set(err, SOTTO_E_INVALID, "vad params: NULL");
    if (p->kind != SOTTO_VAD_ENERGY && p->kind != SOTTO_VAD_SILERO)
        return sotto_err_set(err, SOTTO_E_INVALID,
                             "vad params: kind %d is neither SOTTO_VAD_ENERGY (0) nor "
                             "SOTTO_VAD_SILERO (1)",
                             p->kind);
    if (p->kind == SOTTO_VAD_ENERGY) {
        if (p->frame_ms != 10 && p->frame_ms != 20 && p->frame_ms != 30)
            return sotto_err_set(err, SOTTO_E_INVALID,
                                 "vad params: frame_ms %d not in {10, 20, 30}", p->frame_ms);
        if (!(p->threshold_db >= 0.0f && p->threshold_db <= 40.0f))
            return sotto_err_set(err, SOTTO_E_INVALID, "vad params: threshold_db %g not in 0..40",
                                 (double)p->threshold_db);
    } else {
        if (!p->silero)
            return sotto_err_set(err, SOTTO_E_INVALID,
                                 "vad params: silero (the model) is NULL but kind is "
                                 "SOTTO_VAD_SILERO; load one with sotto_silero_load()");
        if (!(p->speech_threshold > 0.0f && p->speech_threshold <= 1.0f))
            return sotto_err_set(err, SOTTO_E_INVALID,
                                 "vad params: speech_threshold %g not in (0, 1]",
                                 (double)p->speech_threshold);
        if (!(p->neg_threshold >= 0.0f && p->neg_threshold <= p->speech_threshold))
            return sotto_err_set(err, SOTTO_E_INVALID,
                                 "vad params: neg_threshold %g not in [0, speech_threshold %g]",
                                 (double)p->neg_threshold, (double)p->speech_threshold);
    }
    if (!(p->start_gate_db >= 0.0f && p->start_gate_db <= 60.0f) ||
        !(p->end_gate_db >= 0.0f && p->end_gate_db <= 60.0f))
        return sotto_err_set(err, SOTTO_E_INVALID,
                             "vad params: start_gate_db %g or end_gate_db %g not in 0..60",
                             (double)p->start_gate_db, (double)p->end_gate_db);
    const struct {
        const char *name;
        int v;
    } ms[] = {{"min_speech_ms", p->min_speech_ms},
              {"silence_ms", p->silence_ms},
              {"preroll_ms", p->preroll_ms},
              {"tail_ms", p->tail_ms}};
    for (size_t i = 0; i < sizeof ms / sizeof ms[0]; i++)
        if (ms[i].v < 0 || ms[i].v > 10000)
            return sotto_err_set(err, SOTTO_E_INVALID, "vad params: %s %d not in 0..10000",
                                 ms[i].name, ms[i].v);
    return SOTTO_OK;
}

static float tc_alpha(float tc_ms, int frame_ms) { return expf(-(float)frame_ms / tc_ms); }

static int ceil_div(int a, int b) { return (a + b - 1) / b; }

sotto_vad *sotto_vad_create(const sotto_vad_params *p, sotto_err *err) {
    sotto_vad_params def = sotto_vad_default_params();
    if (!p) p = &def;
    int rc = sotto_vad_params_check(p, err);
    if (rc != SOTTO_OK) return NULL;
    sotto_vad *v = calloc(1, sizeof *v);
    if (!v) {
        sotto_err_set(err, SOTTO_E_NOMEM, "vad: out of memory (%zu bytes)", sizeof *v);
        return NULL;
    }
    v->p = *p;
    v->L = p->kind == SOTTO_VAD_SILERO ? SOTTO_SILERO_CHUNK : VAD_SR * p->frame_ms / 1000;
    v->lvl_window = ceil_div(LVL_WINDOW_MS * (VAD_SR / 1000), v->L);
    v->lvl_min = ceil_div(LVL_MIN_MS * (VAD_SR / 1000), v->L);
    if (p->kind == SOTTO_VAD_SILERO) {
        v->nn = sotto_vad_neural_create(p, err);
        if (!v->nn) {
            free(v);
            return NULL;
        }
        int ms_samples = VAD_SR / 1000;
        v->min_speech_frames = ceil_div(p->min_speech_ms * ms_samples, v->L);
        if (v->min_speech_frames < 1) v->min_speech_frames = 1;
        v->silence_frames = ceil_div(p->silence_ms * ms_samples, v->L);
        if (v->silence_frames < 1) v->silence_frames = 1;
        v->onset_frames = v->min_speech_frames;
        v->run_frames = v->min_speech_frames;
        return v;
    }
    v->nfft = 1;
    while (v->nfft < v->L) v->nfft <<= 1;
    double wsum = 0.0;
    for (int i = 0; i < v->L; i++) {
        v->win[i] = (float)(0.5 - 0.5 * cos(2.0 * M_PI * (i + 0.5) / v->L));
        wsum += (double)v->win[i] * v->win[i];
    }
    /* one-sided bin power -> contribution to the frame's mean square */
    v->pw_scale = (float)(2.0 / ((double)v->nfft * wsum));
    for (int i = 0; i < v->nfft / 2; i++) {
        v->tw_re[i] = (float)cos(-2.0 * M_PI * i / v->nfft);
        v->tw_im[i] = (float)sin(-2.0 * M_PI * i / v->nfft);
    }
    double bin_hz = (double)VAD_SR / v->nfft;
    v->nb = N_EDGES - 1;
    for (int k = 0; k < v->nb; k++) {
        int lo = (int)ceil(band_edges_hz[k] / bin_hz);
        int hi = (int)ceil(band_edges_hz[k + 1] / bin_hz);
        if (hi > v->nfft / 2) hi = v->nfft / 2;
        if (hi <= lo) hi = lo + 1;
        v->band_lo[k] = lo;
        v->band_hi[k] = hi;
    }
    v->gate = powf(10.0f, GATE_DBFS / 10.0f);
    v->a_s = tc_alpha(TC_SMOOTH_MS, p->frame_ms);
    v->a_p = tc_alpha(TC_PRESENCE_MS, p->frame_ms);
    v->a_d = tc_alpha(TC_NOISE_MS, p->frame_ms);
    v->a_m = tc_alpha(TC_MEAN_MS, p->frame_ms);
    v->delta = powf(10.0f, DELTA_DB / 10.0f);
    v->clamp = powf(10.0f, CLAMP_DB / 10.0f);
    v->sub_len = ceil_div(MINWIN_MS / MINWIN_SUB, p->frame_ms);
    v->stat_len = ceil_div(STAT_MS, p->frame_ms);
    if (v->stat_len > MAX_STAT) v->stat_len = MAX_STAT;
    v->min_speech_frames = ceil_div(p->min_speech_ms, p->frame_ms);
    if (v->min_speech_frames < 1) v->min_speech_frames = 1;
    v->silence_frames = ceil_div(p->silence_ms, p->frame_ms);
    if (v->silence_frames < 1) v->silence_frames = 1;
    /* a sound of d < min_speech_ms gives at most ceil(d / frame) + 2 <=
     * ceil(min_speech_ms / frame) + 2 speech frames (it straddles frames; the
     * score spans two): see the endpointer above */
    if (p->min_speech_ms > 0) v->min_speech_frames += 3;
    v->onset_frames = 2 * v->min_speech_frames;
    v->run_frames = RUN_FRAMES < v->min_speech_frames ? RUN_FRAMES : v->min_speech_frames;
    v->a_f = tc_alpha(TC_FLAT_MS, p->frame_ms);
    v->follow_frames = ceil_div(FOLLOW_MS, p->frame_ms);
    return v;
}

void sotto_vad_free(sotto_vad *v) {
    if (!v) return;
    sotto_vad_neural_free(v->nn);
    free(v);
}

/* In-place radix-2 complex FFT of size v->nfft. */
static void fft(sotto_vad *v) {
    float *re = v->re, *im = v->im;
    int n = v->nfft;
    for (int i = 1, j = 0; i < n; i++) {
        int bit = n >> 1;
        for (; j & bit; bit >>= 1) j ^= bit;
        j |= bit;
        if (i < j) {
            float t = re[i];
            re[i] = re[j];
            re[j] = t;
            t = im[i];
            im[i] = im[j];
            im[j] = t;
        }
    }
    for (int len = 2; len <= n; len <<= 1) {
        int half = len >> 1, step = n / len;
        for (int i = 0; i < n; i += len)
            for (int j = 0; j < half; j++) {
                float wr = v->tw_re[j * step], wi = v->tw_im[j * step];
                float xr = re[i + j + half] * wr - im[i + j + half] * wi;
                float xi = re[i + j + half] * wi + im[i + j + half] * wr;
                re[i + j + half] = re[i + j] - xr;
                im[i + j + half] = im[i + j] - xi;
                re[i + j] += xr;
                im[i + j] += xi;
            }
    }
}

static void enqueue(sotto_vad *v, sotto_vad_event_type type, uint64_t sample) {
    if (v->q_n >= QUEUE) return; /* cannot happen: START reserves room for its END */
    sotto_vad_event *e = &v->q[(v->q_head + v->q_n) % QUEUE];
    e->type = type;
    e->sample = sample;
    v->q_n++;
}

static void end_utterance(sotto_vad *v, uint64_t end) {
    enqueue(v, SOTTO_VAD_SPEECH_END, end);
    v->last_end = end;
    v->in_speech = 0;
    v->sil_frames = 0;
}

/* Noise tracking after the frame's decision (band powers in P). */
static void update_noise(sotto_vad *v, const float *P, float score_db) {
    int nb = v->nb;
    for (int k = 0; k < nb; k++) {
        float s = v->a_s * v->S[k] + (1.0f - v->a_s) * P[k];
        v->S[k] = s;
        v->M[k] = v->a_m * v->M[k] + (1.0f - v->a_m) * P[k];
        if (s < v->cur_min[k]) v->cur_min[k] = s;
        if (s < v->Smin[k]) v->Smin[k] = s;
    }
    if (++v->sub_count >= v->sub_len) {
        memcpy(v->sub_min[v->sub_idx], v->cur_min, sizeof v->cur_min);
        v->sub_idx = (v->sub_idx + 1) % MINWIN_SUB;
        v->sub_count = 0;
        for (int k = 0; k < nb; k++) {
            float m = v->S[k];
            for (int u = 0; u < MINWIN_SUB; u++)
                if (v->sub_min[u][k] < m) m = v->sub_min[u][k];
            v->Smin[k] = m;
            v->cur_min[k] = v->S[k];
        }
    }
    float startup = (float)v->frames / (float)(v->frames + 1);
    for (int k = 0; k < nb; k++) {
        float ind = v->S[k] > v->delta * v->Smin[k] ? 1.0f : 0.0f;
        v->pres[k] = v->a_p * v->pres[k] + (1.0f - v->a_p) * ind;
        float a = v->a_d + (1.0f - v->a_d) * v->pres[k];
        if (a > startup) a = startup; /* running mean over the first frames */
        float n = a * v->N[k] + (1.0f - a) * P[k];
        float cap = v->clamp * v->Smin[k];
        if (n > cap) n = cap;
        v->N[k] = n > EPS_POW ? n : EPS_POW;
    }
    /* steady level: the floor jumps to the recent average */
    v->stat[v->stat_pos] = score_db;
    v->stat_pos = (v->stat_pos + 1) % v->stat_len;
    if (v->stat_n < v->stat_len) v->stat_n++;
    if (v->stat_n == v->stat_len) {
        float lo = v->p.threshold_db - HYST_DB, mean = 0.0f, var = 0.0f;
        int above = 1;
        for (int i = 0; i < v->stat_len; i++) {
            mean += v->stat[i];
            if (v->stat[i] <= lo) above = 0;
        }
        mean /= (float)v->stat_len;
        for (int i = 0; i < v->stat_len; i++) var += (v->stat[i] - mean) * (v->stat[i] - mean);
        var /= (float)v->stat_len;
        if (above && var < STAT_STD_DB * STAT_STD_DB) {
            for (int k = 0; k < nb; k++) {
                float m = v->M[k] > EPS_POW ? v->M[k] : EPS_POW;
                v->N[k] = m;
                v->Smin[k] = v->cur_min[k] = v->S[k];
                for (int u = 0; u < MINWIN_SUB; u++) v->sub_min[u][k] = v->S[k];
            }
            v->stat_n = 0;
        }
    }
}

/* ENERGY: the frame's decision (steps 1-6 above). */
static int classify_energy(sotto_vad *v) {
    int L = v->L, nb = v->nb;
    for (int i = 0; i < L; i++) v->re[i] = v->frame[i] * v->win[i];
    for (int i = L; i < v->nfft; i++) v->re[i] = 0.0f;
    memset(v->im, 0, (size_t)v->nfft * sizeof v->im[0]);
    fft(v);
    float P[MAX_BANDS], total = 0.0f;
    for (int k = 0; k < nb; k++) {
        float s = 0.0f;
        for (int b = v->band_lo[k]; b < v->band_hi[k]; b++)
            s += v->re[b] * v->re[b] + v->im[b] * v->im[b];
        P[k] = s * v->pw_scale;
        total += P[k];
    }
    if (!v->started) {
        for (int k = 0; k < nb; k++) {
            float x = P[k] > EPS_POW ? P[k] : EPS_POW;
            v->S[k] = v->Smin[k] = v->cur_min[k] = v->N[k] = v->M[k] = v->Pprev[k] = x;
            for (int u = 0; u < MINWIN_SUB; u++) v->sub_min[u][k] = x;
        }
        v->started = 1;
    }
    float g = 0.0f, lsum = 0.0f, lsq = 0.0f;
    for (int k = 0; k < nb; k++) {
        float gk = (P[k] + v->Pprev[k]) / (2.0f * v->N[k]);
        g += gk;
        float l = 10.0f * log10f(gk + 1e-20f);
        lsum += l;
        lsq += l * l;
    }
    memcpy(v->Pprev, P, (size_t)nb * sizeof P[0]);
    float lmean = lsum / (float)nb, lvar = lsq / (float)nb - lmean * lmean;
    float score_db = 10.0f * log10f(g / (float)nb + 1e-20f);
    float thr = v->p.threshold_db - (v->in_speech ? HYST_DB : 0.0f);
    int dec = score_db > thr && total > v->gate;
    /* flat whitened spectrum: a level change, not speech (speech this far
     * above the floor has a std of >= 3.5 dB in > 99% of frames) */
    int veto = score_db > VETO_DB && lvar < FLAT_HOLD_DB * FLAT_HOLD_DB;
    int flat = veto || (score_db > FLAT_MIN_DB && lvar < FLAT_DB * FLAT_DB);
    if (veto) dec = 0;
    v->flat_run = flat ? v->flat_run + 1 : 0;
    if (v->flat_run >= FLAT_FRAMES && score_db > VETO_DB) v->follow = v->follow_frames;
    int follow = v->flat_run >= FLAT_FRAMES;
    if (v->follow > 0) { /* after a step of the level: follow on looser terms */
        v->follow--;
        if (score_db > 0.5f * FLAT_MIN_DB && lvar < FLAT_HOLD_DB * FLAT_HOLD_DB)
            follow = 1;
        else
            v->follow = 0;
    }
    update_noise(v, P, score_db);
    if (follow) {
        for (int k = 0; k < nb; k++) {
            float n = v->a_f * v->N[k] + (1.0f - v->a_f) * P[k];
            v->N[k] = n > EPS_POW ? n : EPS_POW;
            float lo = FLAT_LIFT * v->N[k];
            if (v->Smin[k] < lo) v->Smin[k] = lo;
            if (v->cur_min[k] < lo) v->cur_min[k] = lo;
            for (int u = 0; u < MINWIN_SUB; u++)
                if (v->sub_min[u][k] < lo) v->sub_min[u][k] = lo;
        }
    }
    return dec;
}

/* The endpointer, on the decision of the next frame. */
static void endpoint(sotto_vad *v, int dec) {
    int L = v->L;
    uint64_t f = v->frames++;
    v->dec[f % HIST] = (uint8_t)dec;
    uint64_t fend = (f + 1) * (uint64_t)L;
    /* speech frames among the last onset_frames frames */
    v->onset_count += dec;
    v->run = dec ? v->run + 1 : 0;
    if (v->run >= v->run_frames) v->run_ok = f + 1;
    if (f >= (uint64_t)v->onset_frames)
        v->onset_count -= v->dec[(f - (uint64_t)v->onset_frames) % HIST];
    if (!v->in_speech) {
        /* START only with room for it and its END in the queue */
        if (dec && v->onset_count >= v->min_speech_frames && v->run_ok > 0 &&
            v->run_ok + (uint64_t)v->onset_frames > f + 1 && v->q_n <= QUEUE - 2) {
            uint64_t first = f; /* first speech frame of the window */
            for (uint64_t j = 1; j < (uint64_t)v->onset_frames && j <= f; j++)
                if (v->dec[(f - j) % HIST]) first = f - j;
            uint64_t pre = (uint64_t)v->p.preroll_ms * (VAD_SR / 1000);
            uint64_t s = first * (uint64_t)L;
            s = s > pre ? s - pre : 0;
            if (s < v->last_end) s = v->last_end;
            enqueue(v, SOTTO_VAD_SPEECH_START, s);
            v->in_speech = 1;
            v->last_speech_end = fend;
            v->sil_frames = 0;
        }
    } else if (dec) {
        v->last_speech_end = fend;
        v->sil_frames = 0;
    } else if (++v->sil_frames >= v->silence_frames) {
        uint64_t e = v->last_speech_end + (uint64_t)v->p.tail_ms * (VAD_SR / 1000);
        end_utterance(v, e < fend ? e : fend);
    }
}

/* The speaker-level gate on the decision of the next frame (v->frame):
 * returns the decision, and adds a speech frame to the level window. */
static int level_gate(sotto_vad *v, int dec) {
    const uint64_t f = v->frames;
    while (v->lvl_n > 0 && v->lvl_frame[v->lvl_head] + (uint64_t)v->lvl_window <= f) {
        v->lvl_hist[v->lvl_bin[v->lvl_head]]--;
        v->lvl_head = (v->lvl_head + 1) % LVL_RING;
        v->lvl_n--;
    }
    if (!dec) return 0;
    double ms = 0.0;
    for (int i = 0; i < v->L; i++) ms += (double)v->frame[i] * v->frame[i];
    ms /= v->L;
    float db = ms > 1e-12 ? (float)(10.0 * log10(ms)) : LVL_FLOOR_DB;
    int bin = (int)floorf((db - LVL_FLOOR_DB) * 2.0f);
    if (bin < 0) bin = 0;
    if (bin >= LVL_BINS) bin = LVL_BINS - 1;
    float gate = v->in_speech ? v->p.end_gate_db : v->p.start_gate_db;
    if (gate > 0.0f && v->lvl_n >= v->lvl_min) {
        /* the level: the bin holding the LVL_PCT percentile, counted from the top */
        int above = (int)((1.0 - LVL_PCT) * v->lvl_n), k = LVL_BINS - 1;
        for (int seen = v->lvl_hist[k]; k > 0 && seen <= above; seen += v->lvl_hist[--k]) {
        }
        float level = LVL_FLOOR_DB + ((float)k + 0.5f) * 0.5f;
        if (db < level - gate) return 0;
    }
    if (v->lvl_n < LVL_RING) { /* always: one entry per frame of the window */
        int t = (v->lvl_head + v->lvl_n) % LVL_RING;
        v->lvl_frame[t] = f;
        v->lvl_bin[t] = (int16_t)bin;
        v->lvl_hist[bin]++;
        v->lvl_n++;
    }
    return 1;
}

static void process_frame(sotto_vad *v) {
    int dec = v->nn ? sotto_vad_neural_frame(v->nn, v->frame, v->frames, v->in_speech)
                    : classify_energy(v);
    endpoint(v, level_gate(v, dec));
}

static int drain(sotto_vad *v, sotto_vad_event *ev, int cap, int *n_ev) {
    int n = 0;
    while (v->q_n > 0 && n < cap) {
        ev[n++] = v->q[v->q_head];
        v->q_head = (v->q_head + 1) % QUEUE;
        v->q_n--;
    }
    if (n_ev) *n_ev = n;
    return v->q_n > 0 ? SOTTO_E_RANGE : SOTTO_OK;
}

int sotto_vad_push(sotto_vad *v, const float *x, size_t n, sotto_vad_event *ev, int cap,
                   int *n_ev) {
    if (n_ev) *n_ev = 0;
    if (!v || (n > 0 && !x) || cap < 0 || (cap > 0 && !ev)) return SOTTO_E_INVALID;
    for (size_t i = 0; i < n; i++) {
        float s = x[i];
        v->frame[v->fill++] = isfinite(s) ? s : 0.0f; /* NaN/inf must not poison the floor */
        if (v->fill == v->L) {
            process_frame(v);
            v->fill = 0;
        }
    }
    v->samples += n;
    return drain(v, ev, cap, n_ev);
}

int sotto_vad_finish(sotto_vad *v, sotto_vad_event *ev, int cap, int *n_ev) {
    if (n_ev) *n_ev = 0;
    if (!v || cap < 0 || (cap > 0 && !ev)) return SOTTO_E_INVALID;
    if (v->in_speech) end_utterance(v, v->samples);
    return drain(v, ev, cap, n_ev);
}

int sotto_vad_in_speech(const sotto_vad *v) { return v ? v->in_speech : 0; }

int sotto_vad_pending_end(const sotto_vad *v, uint64_t *end) {
    if (!v || !v->in_speech || v->sil_frames <= 0) return -1;
    *end = v->last_speech_end + (uint64_t)v->p.tail_ms * (VAD_SR / 1000);
    return (int)((uint64_t)v->sil_frames * (uint64_t)v->L * 1000 / VAD_SR);
}

float sotto_vad_noise_floor_db(const sotto_vad *v) {
    if (!v || !v->started) return -140.0f;
    float s = 0.0f;
    for (int k = 0; k < v->nb; k++) s += v->N[k];
    return 10.0f * log10f(s);
}

int sotto_vad_frame_decision(const sotto_vad *v, uint64_t frame) {
    if (!v || frame >= v->frames || v->frames - frame > HIST) return -1;
    return v->dec[frame % HIST];
}

float sotto_vad_frame_prob(const sotto_vad *v, uint64_t frame) {
    if (!v) return -1.0f;
    if (v->nn) return sotto_vad_neural_prob(v->nn, frame, v->frames);
    int d = sotto_vad_frame_decision(v, frame);
    return d < 0 ? -1.0f : (float)d;
}

int sotto_vad_frame_samples(const sotto_vad *v) { return v ? v->L : 0; }
