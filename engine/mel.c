/* mel.c - Whisper's log-mel spectrogram (see mel.h).
 *
 * Matches faster-whisper's FeatureExtractor step by step:
 *  - the waveform is the input followed by `pad` zeros (length L);
 *  - numpy's reflect padding of 200 on both sides, which for short inputs
 *    reflects repeatedly: it is the periodic extension with period
 *    2 (L - 1) of the mirror image (checked against np.pad for L 1..420);
 *  - frames of 400 samples every 160, window np.hanning(401)[:-1] rounded
 *    to float32, frame * window rounded to float32 as numpy does;
 *  - |rfft|^2, the last STFT frame dropped, giving L / 160 frames;
 *  - Slaney mel filters computed in double and rounded to float32;
 *  - log10(max(x, 1e-10)), floor at global max - 8, (x + 4) / 4.
 * The FFT and the filter sums run in double precision (the reference runs
 * them in float32), so the difference to the reference is its rounding.
 */
#include "mel.h"

#include "fft.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#define MEL_N_BINS (SOTTO_N_FFT / 2 + 1) /* 201 */
#define MEL_MAX_MELS 256

struct sotto_mel {
    int n_mels;
    float *filters; /* [n_mels][MEL_N_BINS] */
    int *lo, *hi;   /* nonzero range [lo, hi) of each filter row */
    float window[SOTTO_N_FFT];
    sotto_fft *fft;
};

/* Per-thread working memory. */
typedef struct mel_scratch {
    float frame[SOTTO_N_FFT];
    sotto_cpx spec[MEL_N_BINS];
    double power[MEL_N_BINS];
    sotto_cpx *fft_tmp;
} mel_scratch;

static const double mel_pi = 3.14159265358979323846264338327950288;

/* np.hanning(401)[:-1] as numpy 2 writes it: 0.5 + 0.5 cos(pi k / (M - 1)),
 * k = 1 - M, 3 - M, ..., with M = 401. */
static void make_window(float *w) {
    const int m = SOTTO_N_FFT + 1;
    for (int t = 0; t < SOTTO_N_FFT; t++) {
        double k = (double)(1 - m + 2 * t);
        w[t] = (float)(0.5 + 0.5 * cos(mel_pi * k / (double)(m - 1)));
    }
}

/* faster-whisper's get_mel_filters(16000, 400, n_mels), in double. */
static int make_filters(sotto_mel *mel) {
    int nm = mel->n_mels, rc = SOTTO_E_NOMEM;
    double *freqs = malloc(((size_t)nm + 2) * sizeof *freqs);
    double fftfreq[MEL_N_BINS];
    if (!freqs) goto done;
    const double val = 1.0 / ((double)SOTTO_N_FFT * (1.0 / (double)SOTTO_SAMPLE_RATE));
    for (int k = 0; k < MEL_N_BINS; k++) fftfreq[k] = (double)k * val;
    const double max_mel = 45.245640471924965, f_sp = 200.0 / 3;
    const double min_log_hz = 1000.0, min_log_mel = (min_log_hz - 0.0) / f_sp;
    const double logstep = log(6.4) / 27.0;
    const double step = max_mel / (double)(nm + 1); /* np.linspace */
    for (int i = 0; i < nm + 2; i++) {
        double mel_i = i == nm + 1 ? max_mel : (double)i * step + 0.0;
        freqs[i] = 0.0 + f_sp * mel_i;
        if (mel_i >= min_log_mel) freqs[i] = min_log_hz * exp(logstep * (mel_i - min_log_mel));
    }
    for (int i = 0; i < nm; i++) {
        double fd0 = freqs[i + 1] - freqs[i], fd1 = freqs[i + 2] - freqs[i + 1];
        double enorm = 2.0 / (freqs[i + 2] - freqs[i]);
        int lo = MEL_N_BINS, hi = 0;
        for (int k = 0; k < MEL_N_BINS; k++) {
            double lower = -(freqs[i] - fftfreq[k]) / fd0;
            double upper = (freqs[i + 2] - fftfreq[k]) / fd1;
            double w = fmax(0.0, fmin(lower, upper)) * enorm;
            float wf = (float)w;
            mel->filters[(size_t)i * MEL_N_BINS + k] = wf;
            if (wf != 0.0f) {
                if (k < lo) lo = k;
                hi = k + 1;
            }
        }
        mel->lo[i] = lo < hi ? lo : 0;
        mel->hi[i] = hi;
    }
    rc = SOTTO_OK;
done:
    free(freqs);
    return rc;
}

sotto_mel *sotto_mel_create(int n_mels, sotto_err *err) {
    if (n_mels < 1 || n_mels > MEL_MAX_MELS) {
        sotto_err_set(err, SOTTO_E_INVALID, "mel: n_mels %d out of range 1..%d", n_mels,
                      MEL_MAX_MELS);
        return NULL;
    }
    sotto_mel *mel = calloc(1, sizeof *mel);
    if (!mel) goto nomem;
    mel->n_mels = n_mels;
    mel->filters = malloc((size_t)n_mels * MEL_N_BINS * sizeof *mel->filters);
    mel->lo = malloc((size_t)n_mels * sizeof *mel->lo);
    mel->hi = malloc((size_t)n_mels * sizeof *mel->hi);
    mel->fft = sotto_fft_create(SOTTO_N_FFT);
    if (!mel->filters || !mel->lo || !mel->hi || !mel->fft) goto nomem;
    if (make_filters(mel) != SOTTO_OK) goto nomem;
    make_window(mel->window);
    return mel;
nomem:
    sotto_mel_free(mel);
    sotto_err_set(err, SOTTO_E_NOMEM, "mel: out of memory creating %d filters", n_mels);
    return NULL;
}

void sotto_mel_free(sotto_mel *mel) {
    if (!mel) return;
    free(mel->filters);
    free(mel->lo);
    free(mel->hi);
    sotto_fft_free(mel->fft);
    free(mel);
}

int sotto_mel_n_mels(const sotto_mel *mel) { return mel->n_mels; }

const float *sotto_mel_filters(const sotto_mel *mel) { return mel->filters; }

/* Sample i (may be < 0 or >= len) of the reflect-padded waveform of length
 * len whose first n samples are x and the rest zeros. */
static inline float sample_at(const float *x, size_t n, size_t len, int64_t i) {
    if (len == 1) {
        i = 0;
    } else {
        int64_t period = 2 * ((int64_t)len - 1);
        i %= period;
        if (i < 0) i += period;
        if (i >= (int64_t)len) i = period - i;
    }
    return (size_t)i < n ? x[i] : 0.0f;
}

/* Windowed frame f into s->frame; returns 1 if it is all zeros. */
static int fill_frame(const sotto_mel *mel, const float *x, size_t n, size_t len, size_t f,
                      mel_scratch *s) {
    int64_t start = (int64_t)f * SOTTO_HOP - SOTTO_N_FFT / 2;
    const float *w = mel->window;
    if (start >= 0 && (size_t)start + SOTTO_N_FFT <= n) {
        const float *src = x + start;
        for (int t = 0; t < SOTTO_N_FFT; t++) s->frame[t] = src[t] * w[t];
    } else if (start >= 0 && (size_t)start >= n && (size_t)start + SOTTO_N_FFT <= len) {
        return 1; /* inside the zero padding */
    } else {
        for (int t = 0; t < SOTTO_N_FFT; t++)
            s->frame[t] = sample_at(x, n, len, start + t) * w[t];
    }
    for (int t = 0; t < SOTTO_N_FFT; t++)
        if (s->frame[t] != 0.0f) return 0;
    return 1;
}

/* log10 mel energies of frame f into out[m * n_frames + f]; returns their max. */
static double mel_frame(const sotto_mel *mel, const float *x, size_t n, size_t len, size_t f,
                        size_t n_frames, float *out, mel_scratch *s) {
    const double log_floor = -10.0; /* log10(1e-10) */
    double vmax = log_floor;
    if (fill_frame(mel, x, n, len, f, s)) {
        for (int m = 0; m < mel->n_mels; m++) out[(size_t)m * n_frames + f] = (float)log_floor;
        return vmax;
    }
    sotto_fft_rfft(mel->fft, s->frame, s->spec, s->fft_tmp);
    for (int k = 0; k < MEL_N_BINS; k++)
        s->power[k] = s->spec[k].re * s->spec[k].re + s->spec[k].im * s->spec[k].im;
    for (int m = 0; m < mel->n_mels; m++) {
        const float *fw = mel->filters + (size_t)m * MEL_N_BINS;
        double acc = 0.0;
        for (int k = mel->lo[m]; k < mel->hi[m]; k++) acc += (double)fw[k] * s->power[k];
        double v = log10(acc > 1e-10 ? acc : 1e-10);
        float vf = (float)v;
        out[(size_t)m * n_frames + f] = vf;
        if (vf > vmax) vmax = vf;
    }
    return vmax;
}

static int pick_threads(int n_threads, size_t n_frames) {
    int t = n_threads;
#ifdef _OPENMP
    if (t <= 0) t = omp_get_max_threads();
#else
    t = 1;
#endif
    if (t < 1) t = 1;
    if ((size_t)t > n_frames) t = (int)n_frames;
    return t;
}

static int run_frames(const sotto_mel *mel, const float *x, size_t n, size_t len,
                      size_t n_frames, int n_threads, float *out, double *gmax_out) {
    int nt = pick_threads(n_threads, n_frames), rc = SOTTO_E_NOMEM;
    size_t tmp_len = sotto_fft_scratch_len(mel->fft);
    mel_scratch *scr = calloc((size_t)nt, sizeof *scr);
    sotto_cpx *tmp = malloc((size_t)nt * tmp_len * sizeof *tmp);
    if (!scr || !tmp) goto done;
    for (int t = 0; t < nt; t++) scr[t].fft_tmp = tmp + (size_t)t * tmp_len;
    double gmax = -HUGE_VAL;
    long long nf = (long long)n_frames;
#ifdef _OPENMP
#pragma omp parallel for num_threads(nt) schedule(static) reduction(max : gmax) if (nt > 1)
#endif
    for (long long f = 0; f < nf; f++) {
        int tid = 0;
#ifdef _OPENMP
        tid = omp_get_thread_num();
#endif
        double v = mel_frame(mel, x, n, len, (size_t)f, n_frames, out, &scr[tid]);
        if (v > gmax) gmax = v;
    }
    *gmax_out = gmax;
    rc = SOTTO_OK;
done:
    free(scr);
    free(tmp);
    return rc;
}

int sotto_mel_compute(const sotto_mel *mel, const float *samples, size_t n, size_t pad,
                      int n_threads, float **out, size_t *n_frames, sotto_err *err) {
    if (!mel || !out || !n_frames || (n > 0 && !samples))
        return sotto_err_set(err, SOTTO_E_INVALID, "mel: NULL argument");
    *out = NULL;
    *n_frames = 0;
    if (pad > SIZE_MAX / 2 || n > SIZE_MAX / 2 - pad || n + pad > (size_t)INT64_MAX / 4)
        return sotto_err_set(err, SOTTO_E_RANGE, "mel: input too long");
    size_t len = n + pad;
    if (len < 1) return sotto_err_set(err, SOTTO_E_INVALID, "mel: empty input (n + pad == 0)");
    size_t nf = len / SOTTO_HOP, nm = (size_t)mel->n_mels;
    if (nf > SIZE_MAX / sizeof(float) / nm)
        return sotto_err_set(err, SOTTO_E_RANGE, "mel: input too long");
    float *res = malloc(nf ? nf * nm * sizeof *res : sizeof *res);
    if (!res) return sotto_err_set(err, SOTTO_E_NOMEM, "mel: out of memory (%zu frames)", nf);
    if (nf == 0) { /* fewer than 160 samples: no frame (numpy would fail on the max) */
        *out = res;
        return SOTTO_OK;
    }
    double gmax = 0.0;
    if (run_frames(mel, samples, n, len, nf, n_threads, res, &gmax) != SOTTO_OK) {
        free(res);
        return sotto_err_set(err, SOTTO_E_NOMEM, "mel: out of memory (scratch)");
    }
    const float thr = (float)gmax - 8.0f; /* float32, like numpy */
    for (size_t i = 0; i < nf * nm; i++) {
        float v = res[i] > thr ? res[i] : thr;
        res[i] = (v + 4.0f) / 4.0f;
    }
    *out = res;
    *n_frames = nf;
    return SOTTO_OK;
}
