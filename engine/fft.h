/* fft.h - real forward FFT of any even length (mixed radix 2/3/4/5 + generic).
 *
 * Used by the mel front end (n = 400 = 2^4 * 5^2). A real transform of
 * length n is computed as a complex transform of length n/2 on the
 * even/odd-interleaved input, followed by the usual split step. All
 * arithmetic is in double precision with twiddles computed once by
 * cos()/sin() (no recurrences), so the result is accurate to ~1e-15
 * relative to the frame's energy.
 *
 * A plan is immutable after creation and may be shared by threads; each
 * thread passes its own scratch buffer.
 */
#ifndef SOTTO_FFT_H
#define SOTTO_FFT_H

#include <stddef.h>

typedef struct sotto_cpx {
    double re, im;
} sotto_cpx;

typedef struct sotto_fft sotto_fft;

/* n: even, 2 .. 1<<24. Returns NULL on a bad length or out of memory. */
sotto_fft *sotto_fft_create(int n);
void sotto_fft_free(sotto_fft *p); /* accepts NULL */
int sotto_fft_len(const sotto_fft *p);

/* Number of sotto_cpx elements of scratch that sotto_fft_rfft needs. */
size_t sotto_fft_scratch_len(const sotto_fft *p);

/* out[k] = sum_t in[t] * exp(-2*pi*i*k*t/n) for k = 0 .. n/2 (n/2 + 1 values). */
void sotto_fft_rfft(const sotto_fft *p, const float *in, sotto_cpx *out, sotto_cpx *scratch);

#endif
