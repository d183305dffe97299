/* fft.c - mixed-radix complex FFT (recursive decimation in time) and the
 * real-input wrapper described in fft.h. */
#include "fft.h"

#include <math.h>
#include <stdlib.h>

#define FFT_MAX_STAGES 48
#define FFT_MAX_LEN (1 << 24)

struct sotto_fft {
    int n;                      /* real length */
    int m;                      /* complex length n / 2 */
    int n_stages;
    int radix[FFT_MAX_STAGES];  /* radix of each stage, outermost first */
    int max_radix;
    sotto_cpx *tw;              /* m twiddles exp(-2 pi i j / m) */
    sotto_cpx *rtw;             /* m + 1 twiddles exp(-2 pi i k / n) */
};

static const double fft_pi = 3.14159265358979323846264338327950288;

static inline sotto_cpx cmul(sotto_cpx a, sotto_cpx b) {
    sotto_cpx r = {a.re * b.re - a.im * b.im, a.re * b.im + a.im * b.re};
    return r;
}

static inline sotto_cpx cadd(sotto_cpx a, sotto_cpx b) {
    sotto_cpx r = {a.re + b.re, a.im + b.im};
    return r;
}

static inline sotto_cpx csub(sotto_cpx a, sotto_cpx b) {
    sotto_cpx r = {a.re - b.re, a.im - b.im};
    return r;
}

/* -i * a */
static inline sotto_cpx cmul_negi(sotto_cpx a) {
    sotto_cpx r = {a.im, -a.re};
    return r;
}

static void factorize(sotto_fft *p) {
    int rem = p->m, k = 0;
    p->max_radix = 1;
    while (rem > 1 && k < FFT_MAX_STAGES) {
        int r;
        if (rem % 4 == 0) r = 4;
        else if (rem % 2 == 0) r = 2;
        else if (rem % 3 == 0) r = 3;
        else if (rem % 5 == 0) r = 5;
        else {
            r = 7;
            while (rem % r != 0) r += 2; /* smallest odd factor; rem itself if prime */
        }
        p->radix[k++] = r;
        if (r > p->max_radix) p->max_radix = r;
        rem /= r;
    }
    p->n_stages = k;
}

sotto_fft *sotto_fft_create(int n) {
    if (n < 2 || n > FFT_MAX_LEN || n % 2 != 0) return NULL;
    sotto_fft *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->n = n;
    p->m = n / 2;
    p->tw = malloc((size_t)p->m * sizeof *p->tw);
    p->rtw = malloc(((size_t)p->m + 1) * sizeof *p->rtw);
    if (!p->tw || !p->rtw) {
        sotto_fft_free(p);
        return NULL;
    }
    for (int j = 0; j < p->m; j++) {
        double a = -2.0 * fft_pi * (double)j / (double)p->m;
        p->tw[j].re = cos(a);
        p->tw[j].im = sin(a);
    }
    for (int k = 0; k <= p->m; k++) {
        double a = -2.0 * fft_pi * (double)k / (double)n;
        p->rtw[k].re = cos(a);
        p->rtw[k].im = sin(a);
    }
    factorize(p);
    return p;
}

void sotto_fft_free(sotto_fft *p) {
    if (!p) return;
    free(p->tw);
    free(p->rtw);
    free(p);
}

int sotto_fft_len(const sotto_fft *p) { return p->n; }

size_t sotto_fft_scratch_len(const sotto_fft *p) {
    return 2 * (size_t)p->m + (size_t)p->max_radix;
}

/* Butterflies of one stage: `out` holds `radix` sub-transforms of length
 * `sub` back to back; they are combined in place into one transform of
 * length radix * sub. Twiddle W_len^j is tw[j * ts]. */
static void bfly2(const sotto_fft *p, sotto_cpx *out, int sub, int ts) {
    for (int k = 0; k < sub; k++) {
        sotto_cpx a0 = out[k];
        sotto_cpx a1 = cmul(out[k + sub], p->tw[k * ts]);
        out[k] = cadd(a0, a1);
        out[k + sub] = csub(a0, a1);
    }
}

static void bfly3(const sotto_fft *p, sotto_cpx *out, int sub, int ts) {
    const double h = 0.86602540378443864676372317075293618; /* sqrt(3) / 2 */
    for (int k = 0; k < sub; k++) {
        sotto_cpx a0 = out[k];
        sotto_cpx a1 = cmul(out[k + sub], p->tw[k * ts]);
        sotto_cpx a2 = cmul(out[k + 2 * sub], p->tw[2 * k * ts]);
        sotto_cpx s = cadd(a1, a2), d = csub(a1, a2);
        sotto_cpx c = {a0.re - 0.5 * s.re, a0.im - 0.5 * s.im};
        sotto_cpx r = cmul_negi(d);
        r.re *= h;
        r.im *= h;
        out[k] = cadd(a0, s);
        out[k + sub] = cadd(c, r);
        out[k + 2 * sub] = csub(c, r);
    }
}

static void bfly4(const sotto_fft *p, sotto_cpx *out, int sub, int ts) {
    for (int k = 0; k < sub; k++) {
        sotto_cpx a0 = out[k];
        sotto_cpx a1 = cmul(out[k + sub], p->tw[k * ts]);
        sotto_cpx a2 = cmul(out[k + 2 * sub], p->tw[2 * k * ts]);
        sotto_cpx a3 = cmul(out[k + 3 * sub], p->tw[3 * k * ts]);
        sotto_cpx t0 = cadd(a0, a2), t1 = csub(a0, a2);
        sotto_cpx t2 = cadd(a1, a3), t3 = cmul_negi(csub(a1, a3));
        out[k] = cadd(t0, t2);
        out[k + sub] = cadd(t1, t3);
        out[k + 2 * sub] = csub(t0, t2);
        out[k + 3 * sub] = csub(t1, t3);
    }
}

static void bfly5(const sotto_fft *p, sotto_cpx *out, int sub, int ts) {
    const double c1 = 0.30901699437494742410229341718281906;  /* cos(2pi/5) */
    const double c2 = -0.80901699437494742410229341718281906; /* cos(4pi/5) */
    const double s1 = 0.95105651629515357211643933337938214;  /* sin(2pi/5) */
    const double s2 = 0.58778525229247312916870595463907277;  /* sin(4pi/5) */
    for (int k = 0; k < sub; k++) {
        sotto_cpx a0 = out[k];
        sotto_cpx a1 = cmul(out[k + sub], p->tw[k * ts]);
        sotto_cpx a2 = cmul(out[k + 2 * sub], p->tw[2 * k * ts]);
        sotto_cpx a3 = cmul(out[k + 3 * sub], p->tw[3 * k * ts]);
        sotto_cpx a4 = cmul(out[k + 4 * sub], p->tw[4 * k * ts]);
        sotto_cpx b1 = cadd(a1, a4), b2 = cadd(a2, a3);
        sotto_cpx d1 = csub(a1, a4), d2 = csub(a2, a3);
        sotto_cpx e1 = {a0.re + c1 * b1.re + c2 * b2.re, a0.im + c1 * b1.im + c2 * b2.im};
        sotto_cpx e2 = {a0.re + c2 * b1.re + c1 * b2.re, a0.im + c2 * b1.im + c1 * b2.im};
        sotto_cpx f1 = {s1 * d1.re + s2 * d2.re, s1 * d1.im + s2 * d2.im};
        sotto_cpx f2 = {s2 * d1.re - s1 * d2.re, s2 * d1.im - s1 * d2.im};
        f1 = cmul_negi(f1);
        f2 = cmul_negi(f2);
        out[k] = cadd(a0, cadd(b1, b2));
        out[k + sub] = cadd(e1, f1);
        out[k + 4 * sub] = csub(e1, f1);
        out[k + 2 * sub] = cadd(e2, f2);
        out[k + 3 * sub] = csub(e2, f2);
    }
}

/* Any radix, O(radix^2) per output group; tmp holds `radix` values. */
static void bfly_generic(const sotto_fft *p, sotto_cpx *out, int sub, int ts, int radix,
                         sotto_cpx *tmp) {
    int len = radix * sub;
    for (int k = 0; k < sub; k++) {
        for (int q = 0; q < radix; q++)
            tmp[q] = cmul(out[k + q * sub], p->tw[(int)(((long long)q * k % len) * ts)]);
        for (int s = 0; s < radix; s++) {
            sotto_cpx acc = tmp[0];
            for (int q = 1; q < radix; q++) {
                int e = (int)((long long)q * s % radix) * sub; /* W_radix^(qs) = W_len^(qs*sub) */
                acc = cadd(acc, cmul(tmp[q], p->tw[e * ts]));
            }
            out[k + s * sub] = acc;
        }
    }
}

/* Transform of length len = radix[stage] * ... * radix[last] of the input
 * in[0], in[stride], in[2*stride], ... into out[0 .. len-1]. */
static void cfft_rec(const sotto_fft *p, sotto_cpx *out, const sotto_cpx *in, size_t stride,
                     int stage, int len, sotto_cpx *tmp) {
    int radix = p->radix[stage];
    int sub = len / radix;
    if (sub == 1) {
        for (int q = 0; q < radix; q++) out[q] = in[(size_t)q * stride];
    } else {
        for (int q = 0; q < radix; q++)
            cfft_rec(p, out + (size_t)q * sub, in + (size_t)q * stride, stride * (size_t)radix,
                     stage + 1, sub, tmp);
    }
    int ts = p->m / len;
    switch (radix) {
    case 2: bfly2(p, out, sub, ts); break;
    case 3: bfly3(p, out, sub, ts); break;
    case 4: bfly4(p, out, sub, ts); break;
    case 5: bfly5(p, out, sub, ts); break;
    default: bfly_generic(p, out, sub, ts, radix, tmp); break;
    }
}

void sotto_fft_rfft(const sotto_fft *p, const float *in, sotto_cpx *out, sotto_cpx *scratch) {
    int m = p->m;
    sotto_cpx *z = scratch, *zf = scratch + m, *tmp = scratch + 2 * (size_t)m;
    for (int j = 0; j < m; j++) {
        z[j].re = in[2 * j];
        z[j].im = in[2 * j + 1];
    }
    if (m == 1) zf[0] = z[0];
    else cfft_rec(p, zf, z, 1, 0, m, tmp);
    /* Split step: X[k] = E[k] + W_n^k O[k] with
     * E = (Z[k] + conj Z[m-k]) / 2 and O = -i (Z[k] - conj Z[m-k]) / 2. */
    for (int k = 0; k <= m; k++) {
        sotto_cpx a = zf[k == m ? 0 : k];
        sotto_cpx b = zf[k == 0 ? 0 : m - k];
        b.im = -b.im;
        sotto_cpx e = {0.5 * (a.re + b.re), 0.5 * (a.im + b.im)};
        sotto_cpx o = cmul_negi(csub(a, b));
        o.re *= 0.5;
        o.im *= 0.5;
        out[k] = cadd(e, cmul(p->rtw[k], o));
    }
}
