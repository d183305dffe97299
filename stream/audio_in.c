/* audio_in.c - a session's audio messages -> 16 kHz mono float (see
 * audio_in.h).
 *
 * PCM is read byte by byte (little-endian, any alignment), downmixed and, at
 * rates other than 16 kHz, converted in chunks of AI_CHUNK frames through the
 * scratch buffer and the streaming resampler, so that no buffer grows with
 * the message. 16 kHz input skips the resampler entirely (bit-exact).
 *
 * Opus packets are validated (length, TOC, frame layout, duration <= 120 ms)
 * before libopus decodes them as mono at 48 kHz; a packet that fails is
 * replaced by libopus's concealment of the previous good packet's duration
 * (zeros if even that fails), so the output timeline never loses time.
 * A packet whose frames all have 0 or 1 byte (DTX, e.g. a lone TOC byte) is
 * legal: libopus conceals it itself; it counts in `concealed` but not in
 * `bad_packets`. input_frames counts every 48 kHz sample fed to the
 * resampler, decoded or concealed.
 */
#include "audio_in.h"

#include "log.h"
#include "resample.h"

#include <math.h>
#include <opus/opus.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define AI_OUT_RATE 16000
#define AI_MIN_RATE 8000
#define AI_MAX_RATE 48000
#define AI_OPUS_RATE 48000
#define AI_OPUS_MAX_FRAME 5760        /* 120 ms at 48 kHz */
#define AI_OPUS_DEFAULT_PLC 960       /* 20 ms at 48 kHz */
#define AI_OPUS_MAX_PACKET (1275 * 48) /* 48 frames of the largest size */
#define AI_CHUNK AI_OPUS_MAX_FRAME    /* PCM frames converted per resampler call */
#define AI_MAX_FRAMES ((uint64_t)1 << 40) /* no message is this long */

struct sotto_audio_in {
    sotto_encoding enc;
    int rate, channels;
    size_t frame_bytes;      /* PCM: bytes per interleaved frame */
    sotto_resampler *rs;     /* NULL for 16 kHz PCM */
    OpusDecoder *dec;        /* opus only */
    int plc_frames;          /* duration of the last good opus packet (48 kHz) */
    sotto_audio_in_stats st;
    float scratch[AI_CHUNK]; /* mono input-rate samples on their way to rs */
};

int sotto_encoding_parse(const char *name, sotto_encoding *out) {
    static const sotto_encoding all[] = {SOTTO_ENCODING_PCM_S16LE, SOTTO_ENCODING_PCM_F32LE,
                                         SOTTO_ENCODING_OPUS};
    if (!name || !out) return SOTTO_E_INVALID;
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (strcmp(name, sotto_encoding_name(all[i])) == 0) {
            *out = all[i];
            return SOTTO_OK;
        }
    return SOTTO_E_INVALID;
}

const char *sotto_encoding_name(sotto_encoding enc) {
    switch (enc) {
    case SOTTO_ENCODING_PCM_S16LE: return "pcm_s16le";
    case SOTTO_ENCODING_PCM_F32LE: return "pcm_f32le";
    case SOTTO_ENCODING_OPUS: return "opus";
    }
    return "unknown";
}

sotto_audio_in *sotto_audio_in_create(sotto_encoding enc, int sample_rate, int channels,
                                      sotto_err *err) {
    sotto_audio_in *a = NULL;
    if (enc != SOTTO_ENCODING_PCM_S16LE && enc != SOTTO_ENCODING_PCM_F32LE &&
        enc != SOTTO_ENCODING_OPUS) {
        sotto_err_set(err, SOTTO_E_INVALID, "audio_in: unknown encoding %d", (int)enc);
        goto fail;
    }
    if (sample_rate < AI_MIN_RATE || sample_rate > AI_MAX_RATE) {
        sotto_err_set(err, SOTTO_E_INVALID, "audio_in: sample_rate %d Hz out of range %d..%d",
                      sample_rate, AI_MIN_RATE, AI_MAX_RATE);
        goto fail;
    }
    if (channels != 1 && channels != 2) {
        sotto_err_set(err, SOTTO_E_INVALID, "audio_in: channels %d (must be 1 or 2)", channels);
        goto fail;
    }
    a = calloc(1, sizeof *a);
    if (!a) {
        sotto_err_set(err, SOTTO_E_NOMEM, "audio_in: out of memory");
        goto fail;
    }
    a->enc = enc;
    a->rate = sample_rate;
    a->channels = channels;
    a->plc_frames = AI_OPUS_DEFAULT_PLC;
    a->frame_bytes = (size_t)channels * (enc == SOTTO_ENCODING_PCM_S16LE ? 2u : 4u);
    int in_rate = enc == SOTTO_ENCODING_OPUS ? AI_OPUS_RATE : sample_rate;
    if (in_rate != AI_OUT_RATE) {
        a->rs = sotto_resampler_create(in_rate, AI_OUT_RATE, SOTTO_RESAMPLE_QUALITY_STREAM, err);
        if (!a->rs) goto fail;
    }
    if (enc == SOTTO_ENCODING_OPUS) {
        int oerr = OPUS_OK;
        a->dec = opus_decoder_create(AI_OPUS_RATE, 1, &oerr);
        if (!a->dec || oerr != OPUS_OK) {
            sotto_err_set(err, oerr == OPUS_ALLOC_FAIL ? SOTTO_E_NOMEM : SOTTO_E_INTERNAL,
                          "audio_in: opus_decoder_create failed: %s", opus_strerror(oerr));
            goto fail;
        }
    }
    return a;
fail:
    sotto_audio_in_free(a);
    return NULL;
}

void sotto_audio_in_free(sotto_audio_in *a) {
    if (!a) return;
    if (a->dec) opus_decoder_destroy(a->dec);
    sotto_resampler_free(a->rs);
    free(a);
}

size_t sotto_audio_in_max_out(const sotto_audio_in *a, size_t len) {
    if (!a) return 0;
    if (a->enc == SOTTO_ENCODING_OPUS) return sotto_resampler_max_out(a->rs, AI_OPUS_MAX_FRAME);
    size_t frames = len / a->frame_bytes;
    if ((uint64_t)frames > AI_MAX_FRAMES) return SIZE_MAX;
    return a->rs ? sotto_resampler_max_out(a->rs, frames) : frames;
}

/* Little-endian readers that do not care about alignment or host order. */
static float rd_s16(const unsigned char *p) {
    return (float)(int16_t)(uint16_t)((unsigned)p[0] | (unsigned)p[1] << 8) / 32768.0f;
}

static float rd_f32(sotto_audio_in *a, const unsigned char *p) {
    uint32_t u = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                 (uint32_t)p[3] << 24;
    float v;
    memcpy(&v, &u, sizeof v);
    if (!isfinite(v)) {
        a->st.nonfinite++;
        return 0.0f;
    }
    return v;
}

/* n interleaved frames at p -> n mono samples at dst. */
static void pcm_convert(sotto_audio_in *a, const unsigned char *p, size_t n, float *dst) {
    if (a->enc == SOTTO_ENCODING_PCM_S16LE) {
        if (a->channels == 1)
            for (size_t i = 0; i < n; i++) dst[i] = rd_s16(p + 2 * i);
        else
            for (size_t i = 0; i < n; i++)
                dst[i] = 0.5f * rd_s16(p + 4 * i) + 0.5f * rd_s16(p + 4 * i + 2);
    } else {
        if (a->channels == 1)
            for (size_t i = 0; i < n; i++) dst[i] = rd_f32(a, p + 4 * i);
        else /* halves first: the sum of two large finite values may overflow */
            for (size_t i = 0; i < n; i++)
                dst[i] = 0.5f * rd_f32(a, p + 8 * i) + 0.5f * rd_f32(a, p + 8 * i + 4);
    }
}

static int push_pcm(sotto_audio_in *a, const unsigned char *p, size_t frames, float *out,
                    size_t cap, size_t *made, sotto_err *err) {
    int rc = SOTTO_OK;
    if (!a->rs) {
        pcm_convert(a, p, frames, out);
        *made = frames;
        goto done;
    }
    for (size_t i = 0; i < frames;) {
        size_t k = frames - i < AI_CHUNK ? frames - i : AI_CHUNK, got = 0;
        pcm_convert(a, p + i * a->frame_bytes, k, a->scratch);
        rc = sotto_resampler_process(a->rs, a->scratch, k, out + *made, cap - *made, &got);
        *made += got;
        if (rc != SOTTO_OK) {
            sotto_err_set(err, rc, "audio_in: resampling %d -> %d Hz failed (%s)", a->rate,
                          AI_OUT_RATE, sotto_strerror(rc));
            goto done;
        }
        i += k;
    }
done:
    return rc;
}

/* Returns the 48 kHz duration of a packet libopus will accept, or 0 (and a
 * reason) for one it must not see. *dtx is set when no frame has more than
 * one byte (libopus conceals those). */
static int opus_check(const unsigned char *p, size_t len, int *dtx, const char **why) {
    unsigned char toc = 0;
    const unsigned char *frames[48];
    opus_int16 sizes[48];
    int off = 0;
    *dtx = 0;
    if (len == 0 || !p) {
        *why = "empty packet";
        return 0;
    }
    if (len > AI_OPUS_MAX_PACKET) {
        *why = "packet larger than 61200 bytes";
        return 0;
    }
    int nf = opus_packet_parse(p, (opus_int32)len, &toc, frames, sizes, &off);
    if (nf <= 0 || nf > 48) {
        *why = "malformed packet (TOC / frame lengths)";
        return 0;
    }
    int ns = opus_packet_get_nb_samples(p, (opus_int32)len, AI_OPUS_RATE);
    if (ns <= 0 || ns > AI_OPUS_MAX_FRAME) {
        *why = "packet duration not in 2.5..120 ms";
        return 0;
    }
    int empty = 1;
    for (int i = 0; i < nf; i++)
        if (sizes[i] > 1) empty = 0;
    *dtx = empty;
    return ns;
}

/* Decodes (or conceals) one packet into a->scratch; returns the sample count. */
static int opus_decode_one(sotto_audio_in *a, const unsigned char *p, size_t len) {
    const char *why = NULL;
    int dtx = 0, n = opus_check(p, len, &dtx, &why);
    if (n > 0) {
        int got = opus_decode_float(a->dec, p, (opus_int32)len, a->scratch, AI_OPUS_MAX_FRAME, 0);
        if (got == n) {
            a->plc_frames = n;
            if (dtx) a->st.concealed += (uint64_t)n;
            return n;
        }
        why = got < 0 ? opus_strerror(got) : "unexpected decoded length";
    }
    n = a->plc_frames;
    a->st.bad_packets++;
    a->st.concealed += (uint64_t)n;
    SOTTO_DEBUG("audio_in: opus packet of %zu bytes concealed (%d samples at 48 kHz): %s", len, n,
                why ? why : "?");
    int got = opus_decode_float(a->dec, NULL, 0, a->scratch, n, 0);
    if (got != n) memset(a->scratch, 0, (size_t)n * sizeof a->scratch[0]);
    return n;
}

int sotto_audio_in_push(sotto_audio_in *a, const void *data, size_t len, float *out, size_t cap,
                        size_t *n_out, sotto_err *err) {
    int rc = SOTTO_OK;
    size_t made = 0;
    const unsigned char *p = data;
    if (!a || !n_out || (len > 0 && !data)) {
        rc = sotto_err_set(err, SOTTO_E_INVALID, "audio_in: NULL argument");
        goto done;
    }
    if (a->enc != SOTTO_ENCODING_OPUS && len % a->frame_bytes != 0) {
        a->st.rejected++;
        rc = sotto_err_set(err, SOTTO_E_FORMAT,
                           "audio_in: %s message of %zu bytes is not a whole number of "
                           "%zu-byte frames (%d channel%s)",
                           sotto_encoding_name(a->enc), len, a->frame_bytes, a->channels,
                           a->channels == 1 ? "" : "s");
        goto done;
    }
    size_t need = sotto_audio_in_max_out(a, len);
    if (need == SIZE_MAX || cap < need || (need > 0 && !out)) {
        rc = sotto_err_set(err, SOTTO_E_RANGE,
                           "audio_in: output capacity %zu below %zu for a %zu-byte message", cap,
                           need, len);
        goto done;
    }
    if (a->enc == SOTTO_ENCODING_OPUS) {
        int n = opus_decode_one(a, p, len);
        a->st.input_frames += (uint64_t)n;
        rc = sotto_resampler_process(a->rs, a->scratch, (size_t)n, out, cap, &made);
        if (rc != SOTTO_OK)
            sotto_err_set(err, rc, "audio_in: resampling 48000 -> %d Hz failed (%s)", AI_OUT_RATE,
                          sotto_strerror(rc));
    } else {
        size_t frames = len / a->frame_bytes;
        a->st.input_frames += (uint64_t)frames;
        rc = push_pcm(a, p, frames, out, cap, &made, err);
    }
    a->st.messages++;
    a->st.output_samples += (uint64_t)made;
done:
    if (n_out) *n_out = made;
    return rc;
}

int sotto_audio_in_flush(sotto_audio_in *a, float *out, size_t cap, size_t *n_out) {
    if (!a || !n_out) return SOTTO_E_INVALID;
    *n_out = 0;
    if (!a->rs) return SOTTO_OK;
    int rc = sotto_resampler_flush(a->rs, out, cap, n_out);
    a->st.output_samples += (uint64_t)*n_out;
    return rc;
}

void sotto_audio_in_get_stats(const sotto_audio_in *a, sotto_audio_in_stats *st) {
    if (!st) return;
    if (!a) {
        memset(st, 0, sizeof *st);
        return;
    }
    *st = a->st;
}
