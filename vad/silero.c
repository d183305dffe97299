/* silero.c - the Silero VAD network, 16 kHz (see silero.h).
 *
 * Layout: activations are time-major ([frame][channel], channels
 * contiguous), and every weight is stored transposed at load time so that
 * each layer is a sequence of y[0..n) += a * w[0..n) over the output
 * channels with n a compile-time constant (128, 64, 264 or 512): loops that
 * GCC vectorizes even at -O2 (no reassociation of sums needed, so results
 * do not depend on -ffast-math). Roughly 0.7 M multiply-adds per chunk:
 *   front end  256 taps x 4 frames x 258   (basis padded to 264 columns)
 *   encoder    3 x (129x128x4 + 128x64x2 + 64x64x1 + 64x128x1)
 *   LSTM       256 x 512   ([x; h] times [W_ih; W_hh]^T, biases summed)
 * Inputs that are exactly zero (ReLU outputs, silence) are skipped, which
 * does not change the result.
 */
#include "silero.h"

#include "mapfile.h"
#include "safetensors.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FORMAT_NAME "sotto-silero-vad"
#define FORMAT_VERSION "1"

#define N_IN (SOTTO_SILERO_CONTEXT + SOTTO_SILERO_CHUNK) /* 576 */
#define N_PAD 64                                         /* reflect padding, right */
#define N_BUF (N_IN + N_PAD)                             /* 640 */
#define WIN 256                                          /* basis length */
#define HOP 128
#define N_FR 4           /* (640 - 256) / 128 + 1 */
#define N_BIN 129        /* real / imaginary channels each */
#define N_SPEC 258       /* 2 * N_BIN */
#define N_SPEC_PAD 264   /* N_SPEC rounded up to a multiple of 8 */
#define HID 128          /* LSTM hidden size */
#define N_GATE (4 * HID) /* i, f, g, o (PyTorch order) */

struct sotto_silero_model {
    float basis[WIN][N_SPEC_PAD];  /* basis[j][k] = forward_basis[k][0][j] */
    float w0[3][N_BIN][128], b0[128]; /* w[k][i][o] = weight[o][i][k] */
    float w1[3][128][64], b1[64];
    float w2[3][64][64], b2[64];
    float w3[3][64][128], b3[128];
    float wl[2 * HID][N_GATE]; /* rows [0,128): W_ih^T; [128,256): W_hh^T */
    float bl[N_GATE];          /* bias_ih + bias_hh */
    float wd[HID], bd;         /* output conv */
};

struct sotto_silero {
    const sotto_silero_model *m;
    float buf[N_BUF]; /* context | chunk | reflection */
    float spec[N_FR][N_SPEC_PAD];
    float mag[N_FR][N_BIN];
    float e0[N_FR][128], e1[2][64], e2[64], e3[128];
    float xh[2 * HID]; /* LSTM input x, then h */
    float c[HID];
    float gates[N_GATE];
};

/* ---- loading -------------------------------------------------------------- */

typedef struct {
    const char *name;
    int rank;
    int64_t dims[3];
} tensor_spec;

enum { T_BASIS, T_W0, T_B0, T_W1, T_B1, T_W2, T_B2, T_W3, T_B3, T_WIH, T_WHH, T_BIH, T_BHH,
       T_WD, T_BD, T_COUNT };

static const tensor_spec k_tensors[T_COUNT] = {
    [T_BASIS] = {"stft.forward_basis", 3, {N_SPEC, 1, WIN}},
    [T_W0] = {"encoder.0.weight", 3, {128, N_BIN, 3}},
    [T_B0] = {"encoder.0.bias", 1, {128}},
    [T_W1] = {"encoder.1.weight", 3, {64, 128, 3}},
    [T_B1] = {"encoder.1.bias", 1, {64}},
    [T_W2] = {"encoder.2.weight", 3, {64, 64, 3}},
    [T_B2] = {"encoder.2.bias", 1, {64}},
    [T_W3] = {"encoder.3.weight", 3, {128, 64, 3}},
    [T_B3] = {"encoder.3.bias", 1, {128}},
    [T_WIH] = {"lstm.weight_ih", 2, {N_GATE, HID}},
    [T_WHH] = {"lstm.weight_hh", 2, {N_GATE, HID}},
    [T_BIH] = {"lstm.bias_ih", 1, {N_GATE}},
    [T_BHH] = {"lstm.bias_hh", 1, {N_GATE}},
    [T_WD] = {"decoder.weight", 3, {1, HID, 1}},
    [T_BD] = {"decoder.bias", 1, {1}},
};

static void shape_str(char *out, size_t n, int rank, const int64_t *dims) {
    size_t k = 0;
    out[0] = '\0';
    k += (size_t)snprintf(out + k, n - k, "[");
    for (int d = 0; d < rank && k < n; d++)
        k += (size_t)snprintf(out + k, n - k, "%s%lld", d ? ", " : "", (long long)dims[d]);
    if (k < n) snprintf(out + k, n - k, "]");
}

/* Element i of a tensor's data (which need not be aligned in the file). */
static float elem(const sotto_st_tensor *t, int64_t i) {
    float v;
    memcpy(&v, (const unsigned char *)t->data + (size_t)i * sizeof v, sizeof v);
    return v;
}

static int get_tensor(const sotto_st_file *f, int id, sotto_st_tensor *t, sotto_err *err) {
    const tensor_spec *s = &k_tensors[id];
    int rc = sotto_st_get(f, s->name, t, err);
    if (rc == SOTTO_E_NOTFOUND)
        return sotto_err_set(err, SOTTO_E_FORMAT, "%s: tensor '%s' is missing", f->path, s->name);
    if (rc != SOTTO_OK) return rc;
    if (t->dtype != SOTTO_DT_F32)
        return sotto_err_set(err, SOTTO_E_FORMAT, "%s: tensor '%s' is %s, expected F32", f->path,
                             s->name, sotto_st_dtype_name(t->dtype));
    int same = t->rank == s->rank;
    for (int d = 0; same && d < s->rank; d++) same = t->dims[d] == s->dims[d];
    if (!same) {
        char got[96], want[96];
        shape_str(got, sizeof got, t->rank, t->dims);
        shape_str(want, sizeof want, s->rank, s->dims);
        return sotto_err_set(err, SOTTO_E_FORMAT, "%s: tensor '%s' has shape %s, expected %s",
                             f->path, s->name, got, want);
    }
    for (int64_t i = 0; i < t->count; i++)
        if (!isfinite(elem(t, i)))
            return sotto_err_set(err, SOTTO_E_FORMAT,
                                 "%s: tensor '%s' has a non-finite value at element %lld",
                                 f->path, s->name, (long long)i);
    return SOTTO_OK;
}

static int check_metadata(const sotto_st_file *f, sotto_err *err) {
    const cJSON *meta = cJSON_GetObjectItemCaseSensitive(f->header, "__metadata__");
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(meta, "format");
    const cJSON *ver = cJSON_GetObjectItemCaseSensitive(meta, "format_version");
    if (!cJSON_IsString(fmt) || strcmp(fmt->valuestring, FORMAT_NAME) != 0)
        return sotto_err_set(err, SOTTO_E_FORMAT,
                             "%s: not a Silero VAD file of sotto (__metadata__.format is not "
                             "\"" FORMAT_NAME "\"; convert with scripts/convert_silero.py)",
                             f->path);
    if (!cJSON_IsString(ver) || strcmp(ver->valuestring, FORMAT_VERSION) != 0)
        return sotto_err_set(err, SOTTO_E_FORMAT,
                             "%s: format_version %s, this build reads " FORMAT_VERSION
                             " (run scripts/fetch_silero.sh again)",
                             f->path, cJSON_IsString(ver) ? ver->valuestring : "(none)");
    return SOTTO_OK;
}

/* After the expected tensors were found: nothing else may be there. */
static int check_no_extra(const sotto_st_file *f, sotto_err *err) {
    const cJSON *item;
    cJSON_ArrayForEach(item, f->header) {
        if (strcmp(item->string, "__metadata__") == 0) continue;
        int known = 0;
        for (int i = 0; i < T_COUNT && !known; i++)
            known = strcmp(item->string, k_tensors[i].name) == 0;
        if (!known)
            return sotto_err_set(err, SOTTO_E_FORMAT, "%s: unexpected tensor '%s'", f->path,
                                 item->string);
    }
    return SOTTO_OK;
}

static void *alloc64(size_t n) {
    size_t r = (n + 63) & ~(size_t)63;
    void *p = aligned_alloc(64, r);
    if (p) memset(p, 0, r);
    return p;
}

static int fill_model(sotto_silero_model *m, const sotto_st_file *f, sotto_err *err) {
    sotto_st_tensor t[T_COUNT];
    int rc = check_metadata(f, err);
    if (rc != SOTTO_OK) return rc;
    for (int i = 0; i < T_COUNT; i++) {
        rc = get_tensor(f, i, &t[i], err);
        if (rc != SOTTO_OK) return rc;
    }
    rc = check_no_extra(f, err);
    if (rc != SOTTO_OK) return rc;
    for (int k = 0; k < N_SPEC; k++)
        for (int j = 0; j < WIN; j++) m->basis[j][k] = elem(&t[T_BASIS], (int64_t)k * WIN + j);
    struct {
        float *w, *b;
        int id_w, id_b, cout, cin;
    } enc[4] = {
        {&m->w0[0][0][0], m->b0, T_W0, T_B0, 128, N_BIN},
        {&m->w1[0][0][0], m->b1, T_W1, T_B1, 64, 128},
        {&m->w2[0][0][0], m->b2, T_W2, T_B2, 64, 64},
        {&m->w3[0][0][0], m->b3, T_W3, T_B3, 128, 64},
    };
    for (int e = 0; e < 4; e++) {
        int co = enc[e].cout, ci = enc[e].cin;
        for (int o = 0; o < co; o++) {
            enc[e].b[o] = elem(&t[enc[e].id_b], o);
            for (int i = 0; i < ci; i++)
                for (int k = 0; k < 3; k++)
                    enc[e].w[((size_t)k * ci + i) * co + o] =
                        elem(&t[enc[e].id_w], ((int64_t)o * ci + i) * 3 + k);
        }
    }
    for (int g = 0; g < N_GATE; g++) {
        for (int j = 0; j < HID; j++) {
            m->wl[j][g] = elem(&t[T_WIH], (int64_t)g * HID + j);
            m->wl[HID + j][g] = elem(&t[T_WHH], (int64_t)g * HID + j);
        }
        m->bl[g] = elem(&t[T_BIH], g) + elem(&t[T_BHH], g);
    }
    for (int j = 0; j < HID; j++) m->wd[j] = elem(&t[T_WD], j);
    m->bd = elem(&t[T_BD], 0);
    return SOTTO_OK;
}

sotto_silero_model *sotto_silero_load(const char *path, sotto_err *err) {
    if (!path) {
        sotto_err_set(err, SOTTO_E_INVALID, "silero: NULL path");
        return NULL;
    }
    sotto_mapfile map = {0};
    if (sotto_mapfile_open(path, &map, err) != SOTTO_OK) return NULL;
    sotto_st_file f;
    int rc = sotto_st_open(&f, path, &map, err);
    sotto_silero_model *m = NULL;
    if (rc == SOTTO_OK) {
        m = alloc64(sizeof *m);
        if (!m)
            rc = sotto_err_set(err, SOTTO_E_NOMEM, "silero: out of memory (%zu bytes)", sizeof *m);
        else
            rc = fill_model(m, &f, err);
        sotto_st_close(&f);
    }
    sotto_mapfile_close(&map);
    if (rc != SOTTO_OK) {
        free(m);
        return NULL;
    }
    return m;
}

void sotto_silero_model_free(sotto_silero_model *m) { free(m); }

/* ---- streams -------------------------------------------------------------- */

sotto_silero *sotto_silero_create(const sotto_silero_model *m, sotto_err *err) {
    if (!m) {
        sotto_err_set(err, SOTTO_E_INVALID, "silero: NULL model");
        return NULL;
    }
    sotto_silero *s = alloc64(sizeof *s);
    if (!s) {
        sotto_err_set(err, SOTTO_E_NOMEM, "silero: out of memory (%zu bytes)", sizeof *s);
        return NULL;
    }
    s->m = m;
    return s; /* zeroed: the reset state */
}

void sotto_silero_free(sotto_silero *s) { free(s); }

void sotto_silero_reset(sotto_silero *s) {
    if (!s) return;
    const sotto_silero_model *m = s->m;
    memset(s, 0, sizeof *s);
    s->m = m;
}

/* y[0..N) += a * x[0..N) for the constant sizes used here. */
#define DEF_AXPY(N)                                                                      \
    static inline void axpy##N(float *restrict y, float a, const float *restrict x) {    \
        for (int i = 0; i < (N); i++) y[i] += a * x[i];                                  \
    }
DEF_AXPY(64)
DEF_AXPY(128)
DEF_AXPY(264)
DEF_AXPY(512)

static inline float sigmoidf(float x) { return 1.0f / (1.0f + expf(-x)); }

/* conv1d k3, pad 1, + ReLU, time-major in/out; w[k][cin][COUT]. */
#define DEF_CONV(COUT)                                                                   \
    static void conv##COUT(const float *restrict in, int tin, int cin,                   \
                           const float *restrict w, const float *restrict b, int stride, \
                           int tout, float *restrict out) {                              \
        for (int t = 0; t < tout; t++) {                                                 \
            float *o = out + (size_t)t * (COUT);                                         \
            memcpy(o, b, (COUT) * sizeof *o);                                            \
            for (int k = 0; k < 3; k++) {                                                \
                int ti = t * stride + k - 1;                                             \
                if (ti < 0 || ti >= tin) continue;                                       \
                const float *x = in + (size_t)ti * cin;                                  \
                const float *wk = w + (size_t)k * cin * (COUT);                          \
                for (int i = 0; i < cin; i++)                                            \
                    if (x[i] != 0.0f) axpy##COUT(o, x[i], wk + (size_t)i * (COUT));      \
            }                                                                            \
            for (int i = 0; i < (COUT); i++) o[i] = o[i] > 0.0f ? o[i] : 0.0f;           \
        }                                                                                \
    }
DEF_CONV(64)
DEF_CONV(128)

float sotto_silero_process(sotto_silero *s, const float chunk[SOTTO_SILERO_CHUNK]) {
    if (!s || !chunk) return 0.0f;
    const sotto_silero_model *m = s->m;
    float *buf = s->buf;
    /* buf[0, 64) holds the context already */
    for (int i = 0; i < SOTTO_SILERO_CHUNK; i++) {
        float x = chunk[i];
        buf[SOTTO_SILERO_CONTEXT + i] = isfinite(x) ? x : 0.0f;
    }
    for (int k = 0; k < N_PAD; k++) buf[N_IN + k] = buf[N_IN - 2 - k]; /* reflect */

    /* front end: 4 frames of 256 samples, hop 128 */
    memset(s->spec, 0, sizeof s->spec);
    for (int j = 0; j < WIN; j++) {
        const float *bj = m->basis[j];
        for (int t = 0; t < N_FR; t++) {
            float x = buf[t * HOP + j];
            if (x != 0.0f) axpy264(s->spec[t], x, bj);
        }
    }
    for (int t = 0; t < N_FR; t++)
        for (int k = 0; k < N_BIN; k++) {
            float re = s->spec[t][k], im = s->spec[t][N_BIN + k];
            s->mag[t][k] = sqrtf(re * re + im * im);
        }

    conv128(&s->mag[0][0], N_FR, N_BIN, &m->w0[0][0][0], m->b0, 1, N_FR, &s->e0[0][0]);
    conv64(&s->e0[0][0], N_FR, 128, &m->w1[0][0][0], m->b1, 2, 2, &s->e1[0][0]);
    conv64(&s->e1[0][0], 2, 64, &m->w2[0][0][0], m->b2, 2, 1, s->e2);
    conv128(s->e2, 1, 64, &m->w3[0][0][0], m->b3, 1, 1, s->e3);

    /* LSTM cell on [x; h] */
    float *xh = s->xh, *g = s->gates, *c = s->c;
    memcpy(xh, s->e3, HID * sizeof *xh);
    memcpy(g, m->bl, sizeof s->gates);
    for (int j = 0; j < 2 * HID; j++)
        if (xh[j] != 0.0f) axpy512(g, xh[j], m->wl[j]);
    float out = m->bd;
    for (int j = 0; j < HID; j++) {
        float ig = sigmoidf(g[j]), fg = sigmoidf(g[HID + j]);
        float gg = tanhf(g[2 * HID + j]), og = sigmoidf(g[3 * HID + j]);
        c[j] = fg * c[j] + ig * gg;
        float h = og * tanhf(c[j]);
        xh[HID + j] = h;
        out += (h > 0.0f ? h : 0.0f) * m->wd[j];
    }
    /* context for the next chunk: the last 64 samples of this one */
    memmove(buf, buf + SOTTO_SILERO_CHUNK, SOTTO_SILERO_CONTEXT * sizeof *buf);
    return sigmoidf(out);
}
