/* resample.c - delay-compensated sample-rate conversion with speexdsp.
 *
 * speex_resampler_skip_zeros() makes the first output sample correspond to
 * input time 0 (the filter's leading half-length of history is skipped), and
 * at the end of a stream zeros are fed until the output reaches
 * round(total_in * out_rate / in_rate) samples (halves round up). The
 * one-shot form runs the streaming form over the whole input, so both give
 * identical samples for the same input. After a flush the converter is back
 * in its initial state and can start a new stream.
 */
#include "resample.h"

#include <speex/speex_resampler.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define RS_MAX_RATE 384000
#define RS_MAX_DOWN_RATIO 400  /* in_rate / out_rate; speex's filter grows with it */
#define RS_CHUNK (1u << 20)    /* samples per speex call (its counts are 32-bit) */
#define RS_ZEROS 1024          /* zeros fed per call while flushing */

struct sotto_resampler {
    SpeexResamplerState *st; /* NULL when in_rate == out_rate (plain copy) */
    int in_rate, out_rate;
    uint64_t total_in, total_out;
    float zeros[RS_ZEROS];
};

static int check_rates(int in_rate, int out_rate, int quality, sotto_err *err) {
    if (in_rate < 1 || in_rate > RS_MAX_RATE || out_rate < 1 || out_rate > RS_MAX_RATE)
        return sotto_err_set(err, SOTTO_E_INVALID,
                             "resample: rates %d -> %d Hz out of range 1..%d", in_rate, out_rate,
                             RS_MAX_RATE);
    if (in_rate / out_rate > RS_MAX_DOWN_RATIO)
        return sotto_err_set(err, SOTTO_E_INVALID,
                             "resample: %d -> %d Hz reduces the rate more than %dx", in_rate,
                             out_rate, RS_MAX_DOWN_RATIO);
    if (quality < 0 || quality > 10)
        return sotto_err_set(err, SOTTO_E_INVALID, "resample: quality %d out of range 0..10",
                             quality);
    return SOTTO_OK;
}

/* round(n * out / in), halves up. */
static uint64_t out_count(uint64_t n, int in_rate, int out_rate) {
    return (n * (uint64_t)out_rate + (uint64_t)in_rate / 2) / (uint64_t)in_rate;
}

sotto_resampler *sotto_resampler_create(int in_rate, int out_rate, int quality,
                                        sotto_err *err) {
    if (check_rates(in_rate, out_rate, quality, err) != SOTTO_OK) return NULL;
    sotto_resampler *rs = calloc(1, sizeof *rs);
    if (!rs) {
        sotto_err_set(err, SOTTO_E_NOMEM, "resample: out of memory");
        return NULL;
    }
    rs->in_rate = in_rate;
    rs->out_rate = out_rate;
    if (in_rate == out_rate) return rs;
    int serr = 0;
    rs->st = speex_resampler_init(1, (spx_uint32_t)in_rate, (spx_uint32_t)out_rate, quality,
                                  &serr);
    if (!rs->st) {
        free(rs);
        sotto_err_set(err, serr == RESAMPLER_ERR_ALLOC_FAILED ? SOTTO_E_NOMEM : SOTTO_E_INVALID,
                      "resample: speexdsp cannot convert %d -> %d Hz: %s", in_rate, out_rate,
                      speex_resampler_strerror(serr));
        return NULL;
    }
    speex_resampler_skip_zeros(rs->st);
    return rs;
}

void sotto_resampler_free(sotto_resampler *rs) {
    if (!rs) return;
    if (rs->st) speex_resampler_destroy(rs->st);
    free(rs);
}

size_t sotto_resampler_max_out(const sotto_resampler *rs, size_t n_in) {
    uint64_t target = out_count(rs->total_in + n_in, rs->in_rate, rs->out_rate);
    uint64_t left = target > rs->total_out ? target - rs->total_out : 0;
    return (size_t)left + (rs->st ? 2 : 0);
}

/* Runs speex until all n_in samples are consumed or out_cap is reached. */
static int feed(sotto_resampler *rs, const float *in, size_t n_in, float *out, size_t out_cap,
                size_t *n_out, size_t *n_used) {
    size_t used = 0, made = 0;
    while (used < n_in && made < out_cap) {
        size_t in_left = n_in - used, out_left = out_cap - made;
        spx_uint32_t il = (spx_uint32_t)(in_left < RS_CHUNK ? in_left : RS_CHUNK);
        spx_uint32_t ol = (spx_uint32_t)(out_left < RS_CHUNK ? out_left : RS_CHUNK);
        if (speex_resampler_process_float(rs->st, 0, in + used, &il, out + made, &ol) != 0)
            return SOTTO_E_INTERNAL;
        if (il == 0 && ol == 0) return SOTTO_E_INTERNAL;
        used += il;
        made += ol;
    }
    *n_out = made;
    *n_used = used;
    return SOTTO_OK;
}

int sotto_resampler_process(sotto_resampler *rs, const float *in, size_t n_in, float *out,
                            size_t out_cap, size_t *n_out) {
    if (!rs || !n_out || (n_in > 0 && (!in || !out))) return SOTTO_E_INVALID;
    *n_out = 0;
    if (out_cap < sotto_resampler_max_out(rs, n_in)) return SOTTO_E_RANGE;
    if (!rs->st) {
        if (n_in) memcpy(out, in, n_in * sizeof *in);
        rs->total_in += n_in;
        rs->total_out += n_in;
        *n_out = n_in;
        return SOTTO_OK;
    }
    size_t made = 0, used = 0;
    int rc = feed(rs, in, n_in, out, out_cap, &made, &used);
    rs->total_in += used;
    rs->total_out += made;
    *n_out = made;
    if (rc == SOTTO_OK && used < n_in) rc = SOTTO_E_RANGE;
    return rc;
}

/* Back to the start-of-stream state so that the converter can be reused. */
static void rs_restart(sotto_resampler *rs) {
    rs->total_in = 0;
    rs->total_out = 0;
    if (rs->st) {
        speex_resampler_reset_mem(rs->st);
        speex_resampler_skip_zeros(rs->st);
    }
}

int sotto_resampler_flush(sotto_resampler *rs, float *out, size_t out_cap, size_t *n_out) {
    if (!rs || !n_out) return SOTTO_E_INVALID;
    *n_out = 0;
    uint64_t target = out_count(rs->total_in, rs->in_rate, rs->out_rate);
    size_t need = target > rs->total_out ? (size_t)(target - rs->total_out) : 0;
    if (need > 0 && !out) return SOTTO_E_INVALID;
    if (out_cap < need) return SOTTO_E_RANGE;
    size_t made = 0;
    /* Each pass consumes zeros or produces output; the filter needs at most
     * its latency plus need * in / out input samples. */
    uint64_t budget = (uint64_t)need * (uint64_t)rs->in_rate / (uint64_t)rs->out_rate +
                      (rs->st ? (uint64_t)speex_resampler_get_input_latency(rs->st) : 0) + 2;
    uint64_t fed = 0;
    while (made < need) {
        size_t m = 0, used = 0;
        int rc = feed(rs, rs->zeros, RS_ZEROS, out + made, need - made, &m, &used);
        if (rc != SOTTO_OK) return rc;
        made += m;
        fed += used;
        if (fed > budget + 2 * RS_ZEROS) return SOTTO_E_INTERNAL;
    }
    *n_out = made;
    rs_restart(rs);
    return SOTTO_OK;
}

int sotto_resample(const float *in, size_t n, int in_rate, int out_rate, int quality,
                   float **out, size_t *n_out, sotto_err *err) {
    if (!out || !n_out || (n > 0 && !in))
        return sotto_err_set(err, SOTTO_E_INVALID, "resample: NULL argument");
    *out = NULL;
    *n_out = 0;
    int rc = check_rates(in_rate, out_rate, quality, err);
    if (rc != SOTTO_OK) return rc;
    if (n > SIZE_MAX / sizeof(float) / ((size_t)out_rate / (size_t)in_rate + 2) ||
        (uint64_t)n > UINT64_MAX / RS_MAX_RATE)
        return sotto_err_set(err, SOTTO_E_RANGE, "resample: input too long (%zu samples)", n);
    sotto_resampler *rs = sotto_resampler_create(in_rate, out_rate, quality, err);
    if (!rs) return err ? err->code : SOTTO_E_NOMEM;
    size_t cap = sotto_resampler_max_out(rs, n), got = 0, tail = 0;
    float *buf = malloc((cap ? cap : 1) * sizeof *buf);
    if (!buf) {
        rc = sotto_err_set(err, SOTTO_E_NOMEM, "resample: out of memory (%zu samples)", cap);
        goto done;
    }
    rc = sotto_resampler_process(rs, in, n, buf, cap, &got);
    if (rc == SOTTO_OK) rc = sotto_resampler_flush(rs, buf + got, cap - got, &tail);
    if (rc != SOTTO_OK) {
        sotto_err_set(err, rc, "resample: %d -> %d Hz failed (%s)", in_rate, out_rate,
                      sotto_strerror(rc));
        goto done;
    }
    *out = buf;
    *n_out = got + tail;
    buf = NULL;
done:
    free(buf);
    sotto_resampler_free(rs);
    return rc;
}
