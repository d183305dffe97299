/* resample.h - sample-rate conversion through speexdsp.
 *
 * Both the one-shot and the streaming forms compensate the filter delay, so
 * that output sample k corresponds to time k / out_rate of the input (no
 * leading silence, no lost tail): a one-shot conversion of n samples yields
 * exactly round(n * out_rate / in_rate) samples.
 */
#ifndef SOTTO_RESAMPLE_H
#define SOTTO_RESAMPLE_H

#include "sotto_err.h"

#include <stddef.h>

/* speexdsp quality 0..10; 10 is the best (used for files). */
#define SOTTO_RESAMPLE_QUALITY_FILE 10
#define SOTTO_RESAMPLE_QUALITY_STREAM 5

/* One-shot mono conversion. *out is malloc'd (caller frees). When the rates
 * are equal the input is copied. */
int sotto_resample(const float *in, size_t n, int in_rate, int out_rate, int quality,
                   float **out, size_t *n_out, sotto_err *err);

/* Streaming mono converter for live audio (one per session). */
typedef struct sotto_resampler sotto_resampler;

sotto_resampler *sotto_resampler_create(int in_rate, int out_rate, int quality,
                                        sotto_err *err);
void sotto_resampler_free(sotto_resampler *rs); /* accepts NULL */

/* Upper bound of the output count for n_in more input samples (including
 * what a later flush may produce). */
size_t sotto_resampler_max_out(const sotto_resampler *rs, size_t n_in);

/* Converts all n_in samples; writes at most out_cap samples to out and the
 * count to *n_out. Returns SOTTO_E_RANGE if out_cap < sotto_resampler_max_out(n_in). */
int sotto_resampler_process(sotto_resampler *rs, const float *in, size_t n_in, float *out,
                            size_t out_cap, size_t *n_out);

/* Emits the samples still held in the filter (end of stream). */
int sotto_resampler_flush(sotto_resampler *rs, float *out, size_t out_cap, size_t *n_out);

#endif
