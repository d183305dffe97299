/* gpu_cuda.c - the engine's forward pass on an NVIDIA GPU (see gpu.h):
 * the same steps as encoder.c and decoder.c, on device buffers, with the
 * kernels of kernels/cuda/ and cuBLAS.
 *
 * Linear layers: decode-sized batches (n <= SKINNY_MAX rows) go through the
 * fused dequantizing skinny GEMM (sotto_cuda_linear), which reads each packed
 * weight once; encoder-sized batches decode the layer into a float scratch
 * buffer and call cuBLAS (F32 weights are used in place). Encoder attention
 * is two strided-batched GEMMs around a row softmax; decoder attention is the
 * per-row kernel over the K/V cache (causal for prompts).
 *
 * Encoder-sized GEMMs run in plain fp32 by default, so results follow the CPU
 * to within summation order; SOTTO_CUDA_GEMM=tf32 uses TF32 tensor cores and
 * SOTTO_CUDA_GEMM=bf16 bf16 operands (weights decoded to bf16, activations
 * rounded) with fp32 accumulation. The decoder step is captured once per row
 * count in a CUDA graph (SOTTO_CUDA_GRAPHS=0: launched kernel by kernel).
 */
#include "gpu.h"

#include "cublas_lazy.h"
#include "cuda_linear.h"
#include "cuda_ops.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SKINNY_MAX 32

static const sotto_backend k_cuda; /* the table, at the end */

typedef struct gln {
    float *g, *b;
} gln;

typedef struct glin {
    sotto_cuda_wmat *w;
    float *b; /* may be NULL */
} glin;

typedef struct genc {
    gln attn_ln, mlp_ln;
    glin q, k, v, o, fc1, fc2;
} genc;

typedef struct gdec {
    gln attn_ln, cross_ln, mlp_ln;
    glin q, k, v, o, cq, ck, cv, co, fc1, fc2;
} gdec;

typedef struct sotto_gpu_model sotto_gpu_model;

struct sotto_gpu_model {
    unsigned long long id; /* unique per upload: keys the decoder-step graphs */
    float *conv1_w, *conv1_b, *conv2_w, *conv2_b, *enc_pos;
    genc *enc;
    gdec *dec;
    gln enc_ln, dec_ln;
    sotto_cuda_wmat *emb;
    void **vecs; /* device vectors to free */
    int n_vecs, cap_vecs;
    sotto_cuda_wmat **mats; /* matrices to free */
    int n_mats, cap_mats;
    size_t part_bytes[SOTTO_PART_COUNT];
};

static int cuda_err(sotto_err *err, cudaError_t e, const char *what) {
    return sotto_err_set(err, SOTTO_E_INTERNAL, "cuda: %s: %s", what, cudaGetErrorString(e));
}

static int blas_err(sotto_err *err, cublasStatus_t s, const char *what) {
    return sotto_err_set(err, SOTTO_E_INTERNAL, "cuBLAS: %s failed (status %d)", what, (int)s);
}

int sotto_gpu_probe(char *desc, size_t desc_sz, char *why, size_t why_sz) {
    if (!sotto_cuda_available(desc, desc_sz, why, why_sz)) return 0;
    /* cuBLAS is opened here, the first time a GPU is there to use it */
    return sotto_cublas_load(why, why_sz);
}

int sotto_gpu_mem_info(size_t *used, size_t *total, sotto_err *err) {
    size_t fr = 0, tot = 0;
    cudaError_t e = cudaMemGetInfo(&fr, &tot);
    *used = tot - fr, *total = tot;
    return e == cudaSuccess ? SOTTO_OK : cuda_err(err, e, "cudaMemGetInfo");
}

/* ---- model upload ---------------------------------------------------- */

static int track(void ***arr, int *n, int *cap, void *p) {
    if (*n == *cap) {
        int nc = *cap ? 2 * *cap : 64;
        void **a = realloc(*arr, sizeof(void *) * (size_t)nc);
        if (!a) return -1;
        *arr = a, *cap = nc;
    }
    (*arr)[(*n)++] = p;
    return 0;
}

static float *up_vec(sotto_gpu_model *g, const float *host, size_t n, int part, sotto_err *err) {
    if (!host) return NULL;
    float *d = sotto_cuda_malloc(sizeof(float) * n, err);
    if (!d) return NULL;
    if (track(&g->vecs, &g->n_vecs, &g->cap_vecs, d)) {
        sotto_cuda_free(d);
        sotto_err_set(err, SOTTO_E_NOMEM, "out of memory");
        return NULL;
    }
    if (sotto_cuda_copy(d, host, sizeof(float) * n, 1, NULL, err)) return NULL; /* load time: legacy stream */
    g->part_bytes[part] += sizeof(float) * n;
    return d;
}

static int up_ln(sotto_gpu_model *g, const sotto_ln *ln, int d, int part, gln *out, sotto_err *err) {
    out->g = up_vec(g, ln->g, (size_t)d, part, err);
    out->b = out->g ? up_vec(g, ln->b, (size_t)d, part, err) : NULL;
    return out->g && out->b ? SOTTO_OK : (err->code ? err->code : SOTTO_E_INTERNAL);
}

static int up_lin(sotto_gpu_model *g, const sotto_lin *l, int part, glin *out, sotto_err *err) {
    out->w = sotto_cuda_wmat_upload(&l->w, err);
    if (!out->w) return err->code ? err->code : SOTTO_E_INTERNAL;
    if (track((void ***)&g->mats, &g->n_mats, &g->cap_mats, out->w)) {
        sotto_cuda_wmat_free(out->w);
        return sotto_err_set(err, SOTTO_E_NOMEM, "out of memory");
    }
    g->part_bytes[part] += sotto_cuda_wmat_bytes(out->w);
    out->b = NULL;
    if (l->b && !(out->b = up_vec(g, l->b, (size_t)l->w.rows, part, err))) return err->code;
    return SOTTO_OK;
}

static void gmodel_free(sotto_gpu_model *g);

static sotto_gpu_model *gmodel_create(const sotto_model *m, sotto_err *err) {
    sotto_err local_err = {0};
    if (!err) err = &local_err;
    const sotto_hparams *hp = &m->hp;
    sotto_gpu_model *g = calloc(1, sizeof *g);
    if (g) g->enc = calloc((size_t)hp->n_audio_layer, sizeof *g->enc);
    if (g) g->dec = calloc((size_t)hp->n_text_layer, sizeof *g->dec);
    if (!g || !g->enc || !g->dec) {
        gmodel_free(g);
        sotto_err_set(err, SOTTO_E_NOMEM, "out of memory");
        return NULL;
    }
    static atomic_ullong next_id = 1;
    g->id = atomic_fetch_add(&next_id, 1);
    const int E = SOTTO_PART_ENCODER, D = SOTTO_PART_DECODER, da = hp->n_audio_state,
              dt = hp->n_text_state;
    if (!(g->conv1_w = up_vec(g, m->conv1_w, (size_t)da * hp->n_mels * 3, E, err)) ||
        !(g->conv1_b = up_vec(g, m->conv1_b, (size_t)da, E, err)) ||
        !(g->conv2_w = up_vec(g, m->conv2_w, (size_t)da * da * 3, E, err)) ||
        !(g->conv2_b = up_vec(g, m->conv2_b, (size_t)da, E, err)) ||
        !(g->enc_pos = up_vec(g, m->enc_pos, (size_t)hp->n_audio_ctx * da, E, err)))
        goto fail;
    for (int l = 0; l < hp->n_audio_layer; l++) {
        const sotto_enc_layer *L = &m->enc[l];
        genc *G = &g->enc[l];
        if (up_ln(g, &L->attn_ln, da, E, &G->attn_ln, err) || up_lin(g, &L->q, E, &G->q, err) ||
            up_lin(g, &L->k, E, &G->k, err) || up_lin(g, &L->v, E, &G->v, err) ||
            up_lin(g, &L->o, E, &G->o, err) || up_ln(g, &L->mlp_ln, da, E, &G->mlp_ln, err) ||
            up_lin(g, &L->fc1, E, &G->fc1, err) || up_lin(g, &L->fc2, E, &G->fc2, err))
            goto fail;
    }
    if (up_ln(g, &m->enc_ln, da, E, &g->enc_ln, err)) goto fail;
    for (int l = 0; l < hp->n_text_layer; l++) {
        const sotto_dec_layer *L = &m->dec[l];
        gdec *G = &g->dec[l];
        if (up_ln(g, &L->attn_ln, dt, D, &G->attn_ln, err) || up_lin(g, &L->q, D, &G->q, err) ||
            up_lin(g, &L->k, D, &G->k, err) || up_lin(g, &L->v, D, &G->v, err) ||
            up_lin(g, &L->o, D, &G->o, err) || up_ln(g, &L->cross_ln, dt, D, &G->cross_ln, err) ||
            up_lin(g, &L->cq, D, &G->cq, err) || up_lin(g, &L->ck, D, &G->ck, err) ||
            up_lin(g, &L->cv, D, &G->cv, err) || up_lin(g, &L->co, D, &G->co, err) ||
            up_ln(g, &L->mlp_ln, dt, D, &G->mlp_ln, err) || up_lin(g, &L->fc1, D, &G->fc1, err) ||
            up_lin(g, &L->fc2, D, &G->fc2, err))
            goto fail;
    }
    if (up_ln(g, &m->dec_ln, dt, D, &g->dec_ln, err)) goto fail;
    glin emb;
    sotto_lin e = {m->emb, NULL};
    if (up_lin(g, &e, SOTTO_PART_EMBED, &emb, err)) goto fail;
    g->emb = emb.w;
    return g;
fail:
    if (!err->code) sotto_err_set(err, SOTTO_E_INTERNAL, "cuda: uploading the weights failed");
    gmodel_free(g);
    return NULL;
}

static void gmodel_free(sotto_gpu_model *g) {
    if (!g) return;
    for (int i = 0; i < g->n_vecs; i++) sotto_cuda_free(g->vecs[i]);
    for (int i = 0; i < g->n_mats; i++) sotto_cuda_wmat_free(g->mats[i]);
    free(g->vecs);
    free(g->mats);
    free(g->enc);
    free(g->dec);
    free(g);
}

static const sotto_gpu_model *gmodel(const sotto_model *m) { return m->be_model; }

static int cuda_model_upload(sotto_model *m, sotto_err *err) {
    sotto_err local_err = {0};
    if (!err) err = &local_err;
    m->be_model = gmodel_create(m, err);
    return m->be_model ? SOTTO_OK : err->code ? err->code : SOTTO_E_INTERNAL;
}

static void cuda_model_free(sotto_model *m) {
    gmodel_free(m->be_model);
    m->be_model = NULL;
}

static size_t cuda_model_part_bytes(const sotto_model *m, int part) {
    const sotto_gpu_model *g = gmodel(m);
    return g && part >= 0 && part < SOTTO_PART_COUNT ? g->part_bytes[part] : 0;
}

/* ---- states ----------------------------------------------------------- */

/* What a GPU state keeps (sotto_state.be_state). */
typedef struct gstate {
    /* the K/V caches on the device, in state.h's layouts (cross_k as cross_v) */
    float *cross_k, *cross_v, *self_k, *self_v;
    float *gather_tmp;  /* the sequence gather's scratch (device), kept: beams gather every step */
    size_t gather_cap;  /* its floats */
    float *d_enc_out;  /* the encoder output on the device */
    int enc_out_stale; /* the host's enc_out not yet copied back */
    /* The state's own stream, for the work that comes without a workspace:
       the encoder output's copy back and the sequence gather's copies. Both
       wait for it before they return, and the encoder and decoder steps that
       write the caches wait for theirs, so the two never overlap. */
    cudaStream_t stream;
} gstate;

static gstate *gst(const sotto_state *st) { return st->be_state; }

static int cuda_state_alloc(sotto_state *st, sotto_err *err) {
    sotto_err local_err = {0};
    if (!err) err = &local_err;
    const sotto_hparams *hp = &st->m->hp;
    const size_t cross = sotto_state_cross_floats(st), self = sotto_state_self_floats(st);
    gstate *g = calloc(1, sizeof *g);
    if (!g) return sotto_err_set(err, SOTTO_E_NOMEM, "out of memory for a decoder state");
    st->be_state = g;
    cudaError_t e = cudaStreamCreateWithFlags(&g->stream, cudaStreamNonBlocking);
    if (e != cudaSuccess) {
        g->stream = NULL;
        return cuda_err(err, e, "cudaStreamCreate");
    }
    if (!(g->cross_k = sotto_cuda_malloc(sizeof(float) * cross, err)) ||
        !(g->cross_v = sotto_cuda_malloc(sizeof(float) * cross, err)) ||
        !(g->self_k = sotto_cuda_malloc(sizeof(float) * self, err)) ||
        !(g->self_v = sotto_cuda_malloc(sizeof(float) * self, err)) ||
        !(g->d_enc_out =
              sotto_cuda_malloc(sizeof(float) * (size_t)hp->n_audio_ctx * hp->n_audio_state, err)))
        return err->code;
    return SOTTO_OK;
}

static void cuda_state_free(sotto_state *st) {
    gstate *g = gst(st);
    if (g) {
        if (g->stream) cudaStreamSynchronize(g->stream);
        sotto_cuda_free(g->cross_k);
        sotto_cuda_free(g->cross_v);
        sotto_cuda_free(g->self_k);
        sotto_cuda_free(g->self_v);
        sotto_cuda_free(g->gather_tmp);
        sotto_cuda_free(g->d_enc_out);
        if (g->stream) cudaStreamDestroy(g->stream);
    }
    free(g);
    st->be_state = NULL;
}

static int cuda_state_fetch_encoder_output(sotto_state *st, sotto_err *err) {
    gstate *g = gst(st);
    if (!g->enc_out_stale) return SOTTO_OK;
    const sotto_hparams *hp = &st->m->hp;
    int rc = sotto_cuda_copy(st->enc_out, g->d_enc_out,
                             sizeof(float) * (size_t)hp->n_audio_ctx * hp->n_audio_state, 0, g->stream, err);
    if (!rc) g->enc_out_stale = 0;
    return rc;
}

/* A device-to-device copy queued on stream. */
static int dcopy(cudaStream_t stream, void *dst, const void *src, size_t bytes, sotto_err *err) {
    cudaError_t e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream);
    return e == cudaSuccess ? SOTTO_OK : cuda_err(err, e, "device copy");
}

static int gather_copy(void *stream, float *dst, const float *src, size_t bytes) {
    return dcopy(stream, dst, src, bytes, NULL);
}

/* The beams' reorder: device copies on the state's stream, waited for. */
static int cuda_seq_gather(sotto_state *st, const int *dst, const int *src, const int *lens, int n,
                           sotto_err *err) {
    gstate *g = gst(st);
    size_t need = sotto_kv_gather_tmp_floats(st, lens, n);
    if (need > g->gather_cap) {
        /* at least double: the sequences grow by a row per step, and a device
           allocation per step would cost more than the copies */
        size_t cap = need > 2 * g->gather_cap ? need : 2 * g->gather_cap;
        sotto_cuda_free(g->gather_tmp); /* the state's stream is idle: every gather waits */
        g->gather_cap = 0;
        if (!(g->gather_tmp = sotto_cuda_malloc(sizeof(float) * cap, err)))
            return err ? err->code : SOTTO_E_NOMEM;
        g->gather_cap = cap;
    }
    int rc = sotto_kv_gather(st, g->self_k, g->self_v, g->gather_tmp, dst, src, lens, n, gather_copy, g->stream);
    cudaError_t e = cudaStreamSynchronize(g->stream); /* also after a failed copy: nothing left queued */
    if (rc) return sotto_err_set(err, rc, "cuda: a beam gather copy failed");
    return e == cudaSuccess ? SOTTO_OK : cuda_err(err, e, "beam gather");
}

/* ---- per-thread scratch ---------------------------------------------- */

enum {
    G_X, G_H, G_Q, G_K, G_V, G_ATT, G_FF, G_DEQ, G_COLS, G_SCORES, G_MEL, G_LOGITS, G_ROWS,
    G_XPART, /* the cross-attention's per-chunk partials (sotto_cuda_attention_cross) */
    G_A16, G_QKV16, G_S16, /* bf16 GEMM operands (two per float of capacity) */
    G_COUNT
};

/* Arithmetic of the encoder-sized GEMMs (SOTTO_CUDA_GEMM): plain fp32 (the
 * default: closest to the CPU), TF32 tensor cores, or bf16 operands with fp32
 * accumulation. Decode-sized batches always use the fused kernels. */
enum { GEMM_F32, GEMM_TF32, GEMM_BF16 };

#define MAX_GRAPHS 16

/* A captured decoder step: n rows of a model, over the buffers of one
 * generation (any reallocation makes it stale). */
typedef struct step_graph {
    unsigned long long model_id;
    int n;
    unsigned gen;
    cudaGraphExec_t exec;
    unsigned long long last_used;
} step_graph;

typedef struct gws {
    cublasHandle_t blas;
    cudaStream_t stream;
    float *buf[G_COUNT];
    size_t cap[G_COUNT];
    unsigned gen;            /* bumped whenever a buffer moves */
    int use_graphs;          /* SOTTO_CUDA_GRAPHS=0 turns them off */
    int gemm;                /* GEMM_* */
    step_graph graphs[MAX_GRAPHS];
    unsigned long long clock;
    sotto_cuda_row *rows_host; /* [SKINNY_MAX] */
} gws;

static gws *get_gws(sotto_workspace *ws, sotto_err *err) {
    gws *w = ws->be_scratch_owner == &k_cuda ? ws->be_scratch : NULL;
    if (!w) {
        w = calloc(1, sizeof *w);
        if (w) w->rows_host = calloc(SKINNY_MAX, sizeof *w->rows_host);
        if (!w || !w->rows_host) {
            if (w) free(w->rows_host);
            free(w);
            sotto_err_set(err, SOTTO_E_NOMEM, "out of memory");
            return NULL;
        }
        cudaError_t e = cudaStreamCreateWithFlags(&w->stream, cudaStreamNonBlocking);
        if (e != cudaSuccess) {
            free(w->rows_host);
            free(w);
            cuda_err(err, e, "cudaStreamCreate");
            return NULL;
        }
        char why[512];
        int loaded = sotto_cublas_load(why, sizeof why);
        cublasStatus_t s = loaded ? cublasCreate(&w->blas) : CUBLAS_STATUS_NOT_INITIALIZED;
        if (s != CUBLAS_STATUS_SUCCESS) {
            cudaStreamDestroy(w->stream);
            free(w->rows_host);
            free(w);
            if (loaded) blas_err(err, s, "cublasCreate");
            else sotto_err_set(err, SOTTO_E_UNSUPPORTED, "%s", why);
            return NULL;
        }
        const char *gm = getenv("SOTTO_CUDA_GEMM"), *graphs = getenv("SOTTO_CUDA_GRAPHS");
        w->gemm = gm && !strcmp(gm, "bf16") ? GEMM_BF16 : gm && !strcmp(gm, "tf32") ? GEMM_TF32 : GEMM_F32;
        cublasSetMathMode(w->blas, w->gemm == GEMM_TF32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_PEDANTIC_MATH);
        cublasSetStream(w->blas, w->stream);
        w->use_graphs = !(graphs && !strcmp(graphs, "0"));
        ws->be_scratch = w;
        ws->be_scratch_owner = &k_cuda;
    }
    return w;
}

static void cuda_ws_free(void *p) {
    gws *w = p;
    if (!w) return;
    cudaStreamSynchronize(w->stream);
    for (int i = 0; i < MAX_GRAPHS; i++)
        if (w->graphs[i].exec) cudaGraphExecDestroy(w->graphs[i].exec);
    for (int i = 0; i < G_COUNT; i++) sotto_cuda_free(w->buf[i]);
    cublasDestroy(w->blas);
    cudaStreamDestroy(w->stream);
    free(w->rows_host);
    free(w);
}

static float *gbuf(gws *w, int which, size_t n, sotto_err *err) {
    if (n <= w->cap[which]) return w->buf[which];
    size_t cap = n + n / 4 + 64;
    cudaStreamSynchronize(w->stream);
    sotto_cuda_free(w->buf[which]);
    w->buf[which] = NULL, w->cap[which] = 0;
    w->gen++; /* graphs captured over the old buffer are stale */
    float *p = sotto_cuda_malloc(sizeof(float) * cap, err);
    if (!p) return NULL;
    w->buf[which] = p, w->cap[which] = cap;
    return p;
}

/* ---- building blocks -------------------------------------------------- */

/* y[n][rows] = x[n][cols] W^T (cuBLAS, column-major: Y^T = W^T' X^T) with
 * beta 0 or 1 (accumulate). */
static int gemm(gws *w, const float *W, int rows, int cols, const float *x, int n, float *y,
                float beta, sotto_err *err) {
    const float one = 1.0f;
    cublasStatus_t s = cublasSgemm(w->blas, CUBLAS_OP_T, CUBLAS_OP_N, rows, n, cols, &one, W, cols,
                                   x, cols, &beta, y, rows);
    return s == CUBLAS_STATUS_SUCCESS ? SOTTO_OK : blas_err(err, s, "sgemm");
}

/* y = x W^T + b, or y += x W^T + b when acc. */
static int glinear(gws *w, const glin *L, const float *x, int n, float *y, int acc, sotto_err *err) {
    const int rows = sotto_cuda_wmat_rows(L->w), cols = sotto_cuda_wmat_cols(L->w);
    int rc;
    if (n <= SKINNY_MAX)
        return acc ? sotto_cuda_linear_acc_async(L->w, L->b, x, n, y, w->stream, err)
                   : sotto_cuda_linear_async(L->w, L->b, x, n, y, w->stream, err);
    if (w->gemm == GEMM_BF16) { /* bf16 operands, fp32 accumulation and output */
        const uint16_t *W16 = sotto_cuda_wmat_bf16(L->w);
        if (!W16) {
            uint16_t *s16 = (uint16_t *)gbuf(w, G_DEQ, ((size_t)rows * cols + 1) / 2, err);
            if (!s16) return err->code;
            if ((rc = sotto_cuda_wmat_dequant_bf16(L->w, s16, w->stream, err))) return rc;
            W16 = s16;
        }
        uint16_t *x16 = (uint16_t *)gbuf(w, G_A16, ((size_t)n * cols + 1) / 2, err);
        if (!x16) return err->code;
        if ((rc = sotto_cuda_f32_to_bf16(x, x16, (size_t)n * cols, w->stream, err))) return rc;
        const float one = 1.0f, beta = acc ? 1.0f : 0.0f;
        cublasStatus_t st = cublasGemmEx(w->blas, CUBLAS_OP_T, CUBLAS_OP_N, rows, n, cols, &one, W16, CUDA_R_16BF,
                                         cols, x16, CUDA_R_16BF, cols, &beta, y, CUDA_R_32F, rows,
                                         CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
        if (st != CUBLAS_STATUS_SUCCESS) return blas_err(err, st, "gemmEx (bf16)");
        return L->b ? sotto_cuda_add_bias_rows(y, L->b, n, rows, w->stream, err) : SOTTO_OK;
    }
    const float *W = sotto_cuda_wmat_f32(L->w);
    if (!W) {
        float *s = gbuf(w, G_DEQ, (size_t)rows * cols, err);
        if (!s) return err->code;
        if ((rc = sotto_cuda_wmat_dequant(L->w, s, w->stream, err))) return rc;
        W = s;
    }
    if ((rc = gemm(w, W, rows, cols, x, n, y, acc ? 1.0f : 0.0f, err))) return rc;
    return L->b ? sotto_cuda_add_bias_rows(y, L->b, n, rows, w->stream, err) : SOTTO_OK;
}

/* Full self-attention of one window: q, k, v, out [T][d], H heads of dh.
 * scores: H * T * T floats. */
static int enc_attention(gws *w, const float *q, const float *k, const float *v, float *out, int T,
                         int d, int H, int dh, float scale, float *scores, sotto_err *err) {
    const float zero = 0.0f, one = 1.0f;
    const long long TT = (long long)T * T;
    if (w->gemm == GEMM_BF16) {
        const size_t td = (size_t)T * d;
        uint16_t *q16 = (uint16_t *)gbuf(w, G_QKV16, (3 * td + 1) / 2, err);
        uint16_t *p16 = q16 ? (uint16_t *)gbuf(w, G_S16, ((size_t)H * TT + 1) / 2, err) : NULL;
        if (!p16) return err->code;
        uint16_t *k16 = q16 + td, *v16 = q16 + 2 * td;
        int rc;
        if ((rc = sotto_cuda_f32_to_bf16(q, q16, td, w->stream, err)) ||
            (rc = sotto_cuda_f32_to_bf16(k, k16, td, w->stream, err)) ||
            (rc = sotto_cuda_f32_to_bf16(v, v16, td, w->stream, err)))
            return rc;
        cublasStatus_t s = cublasGemmStridedBatchedEx(w->blas, CUBLAS_OP_T, CUBLAS_OP_N, T, T, dh, &scale, k16,
                                                      CUDA_R_16BF, d, dh, q16, CUDA_R_16BF, d, dh, &zero, scores,
                                                      CUDA_R_32F, T, TT, H, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
        if (s != CUBLAS_STATUS_SUCCESS) return blas_err(err, s, "attention scores (bf16)");
        if ((rc = sotto_cuda_softmax_rows(scores, H * T, T, w->stream, err)) ||
            (rc = sotto_cuda_f32_to_bf16(scores, p16, (size_t)H * TT, w->stream, err)))
            return rc;
        s = cublasGemmStridedBatchedEx(w->blas, CUBLAS_OP_N, CUBLAS_OP_N, dh, T, T, &one, v16, CUDA_R_16BF, d, dh,
                                       p16, CUDA_R_16BF, T, TT, &zero, out, CUDA_R_32F, d, dh, H,
                                       CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
        return s == CUBLAS_STATUS_SUCCESS ? SOTTO_OK : blas_err(err, s, "attention values (bf16)");
    }
    /* S_h[query][key] = scale * q_h . k_h: column-major S_h^T = K_h'^T Q_h' */
    cublasStatus_t s = cublasSgemmStridedBatched(w->blas, CUBLAS_OP_T, CUBLAS_OP_N, T, T, dh, &scale,
                                                 k, d, dh, q, d, dh, &zero, scores, T, TT, H);
    if (s != CUBLAS_STATUS_SUCCESS) return blas_err(err, s, "attention scores");
    int rc = sotto_cuda_softmax_rows(scores, H * T, T, w->stream, err);
    if (rc) return rc;
    /* O_h[query][:] = sum_key P_h[query][key] v_h[key][:]: O_h'^T = V_h'^T P_h'^T */
    s = cublasSgemmStridedBatched(w->blas, CUBLAS_OP_N, CUBLAS_OP_N, dh, T, T, &one, v, d, dh,
                                  scores, T, TT, &zero, out, d, dh, H);
    return s == CUBLAS_STATUS_SUCCESS ? SOTTO_OK : blas_err(err, s, "attention values");
}

/* ---- encoder ---------------------------------------------------------- */

/* Whole windows: the GPU encodes every position (n_ctx is ignored; st->n_ctx = T). */
static int cuda_encode_batch(const sotto_model *m, sotto_workspace *ws, sotto_state *const *sts,
                             const float *const *mels, const int *n_ctx, int B, sotto_err *err) {
    (void)n_ctx;
    sotto_err local_err = {0};
    if (!err) err = &local_err;
    const sotto_gpu_model *g = gmodel(m);
    const sotto_hparams *hp = &m->hp;
    const int T = hp->n_audio_ctx, T2 = 2 * T, d = hp->n_audio_state, nm = hp->n_mels;
    const int H = hp->n_audio_head, dh = d / H, ff = hp->n_audio_ff;
    const size_t BT = (size_t)B * T;
    gws *w = get_gws(ws, err);
    if (!w) return err->code;
    const int cw = nm > d ? nm : d;
    size_t nh = (size_t)T2 * cw > BT * d ? (size_t)T2 * cw : BT * d;
    size_t nf = (size_t)T2 * d > BT * ff ? (size_t)T2 * d : BT * ff;
    float *x = gbuf(w, G_X, BT * d, err), *h = x ? gbuf(w, G_H, nh, err) : NULL;
    float *q = h ? gbuf(w, G_Q, BT * d, err) : NULL, *k = q ? gbuf(w, G_K, BT * d, err) : NULL;
    float *v = k ? gbuf(w, G_V, BT * d, err) : NULL, *att = v ? gbuf(w, G_ATT, BT * d, err) : NULL;
    float *f = att ? gbuf(w, G_FF, nf, err) : NULL;
    float *cols = f ? gbuf(w, G_COLS, (size_t)T2 * cw * 3, err) : NULL;
    float *scores = cols ? gbuf(w, G_SCORES, (size_t)H * T * T, err) : NULL;
    float *mel = scores ? gbuf(w, G_MEL, (size_t)nm * T2, err) : NULL;
    if (!mel) return err->code;
    int rc;
    const float one = 1.0f, zero = 0.0f;

    for (int b = 0; b < B; b++) {
        float *xb = x + (size_t)b * T * d;
        if ((rc = sotto_cuda_copy(mel, mels[b], sizeof(float) * (size_t)nm * T2, 1, w->stream, err))) return rc;
        /* mel [nm][T2] -> time-major xt [T2][nm] (in h) */
        cublasStatus_t s = cublasSgeam(w->blas, CUBLAS_OP_T, CUBLAS_OP_N, nm, T2, &one, mel, T2,
                                       &zero, h, nm, h, nm);
        if (s != CUBLAS_STATUS_SUCCESS) return blas_err(err, s, "mel transpose");
        if ((rc = sotto_cuda_im2col_k3(h, T2, nm, 1, cols, w->stream, err)) ||
            (rc = gemm(w, g->conv1_w, d, nm * 3, cols, T2, f, 0.0f, err)) ||
            (rc = sotto_cuda_add_bias_rows(f, g->conv1_b, T2, d, w->stream, err)) ||
            (rc = sotto_cuda_gelu(f, (size_t)T2 * d, w->stream, err)) ||
            (rc = sotto_cuda_im2col_k3(f, T2, d, 2, cols, w->stream, err)) ||
            (rc = gemm(w, g->conv2_w, d, d * 3, cols, T, xb, 0.0f, err)) ||
            (rc = sotto_cuda_add_bias_rows(xb, g->conv2_b, T, d, w->stream, err)) ||
            (rc = sotto_cuda_gelu(xb, (size_t)T * d, w->stream, err)) ||
            (rc = sotto_cuda_add(xb, g->enc_pos, (size_t)T * d, w->stream, err)))
            return rc;
    }
    const float scale = 1.0f / sqrtf((float)dh);
    for (int l = 0; l < hp->n_audio_layer; l++) {
        const genc *L = &g->enc[l];
        if ((rc = sotto_cuda_layer_norm(x, h, (int)BT, d, L->attn_ln.g, L->attn_ln.b, 1e-5f, w->stream, err)) ||
            (rc = glinear(w, &L->q, h, (int)BT, q, 0, err)) ||
            (rc = glinear(w, &L->k, h, (int)BT, k, 0, err)) ||
            (rc = glinear(w, &L->v, h, (int)BT, v, 0, err)))
            return rc;
        for (int b = 0; b < B; b++) {
            size_t o = (size_t)b * T * d;
            if ((rc = enc_attention(w, q + o, k + o, v + o, att + o, T, d, H, dh, scale, scores, err)))
                return rc;
        }
        if ((rc = glinear(w, &L->o, att, (int)BT, x, 1, err)) ||
            (rc = sotto_cuda_layer_norm(x, h, (int)BT, d, L->mlp_ln.g, L->mlp_ln.b, 1e-5f, w->stream, err)) ||
            (rc = glinear(w, &L->fc1, h, (int)BT, f, 0, err)) ||
            (rc = sotto_cuda_gelu(f, BT * ff, w->stream, err)) ||
            (rc = glinear(w, &L->fc2, f, (int)BT, x, 1, err)))
            return rc;
    }
    const size_t per_layer = (size_t)T * hp->n_text_state;
    for (int b = 0; b < B; b++) {
        sotto_state *st = sts[b];
        float *enc_out = gst(st)->d_enc_out;
        if ((rc = sotto_cuda_layer_norm(x + (size_t)b * T * d, enc_out, T, d, g->enc_ln.g,
                                        g->enc_ln.b, 1e-5f, w->stream, err)))
            return rc;
        for (int l = 0; l < hp->n_text_layer; l++) {
            const gdec *L = &g->dec[l];
            if ((rc = glinear(w, &L->ck, enc_out, T, gst(st)->cross_k + l * per_layer, 0, err)) ||
                (rc = glinear(w, &L->cv, enc_out, T, gst(st)->cross_v + l * per_layer, 0, err)))
                return rc;
        }
    }
    cudaError_t e = cudaStreamSynchronize(w->stream);
    if (e != cudaSuccess) return cuda_err(err, e, "encoder");
    for (int b = 0; b < B; b++) {
        sts[b]->encoded = 1;
        sts[b]->n_ctx = T;
        gst(sts[b])->enc_out_stale = 1;
        memset(sts[b]->seq_len, 0, sizeof(int) * (size_t)sts[b]->max_seqs);
    }
    return SOTTO_OK;
}

/* ---- decoder ---------------------------------------------------------- */

static float *self_at(const sotto_state *st, float *base, int layer, int seq, int pos) {
    return sotto_state_self(st, base, layer, seq) + (size_t)pos * st->m->hp.n_text_state;
}

/* The decoder step's kernels for n <= SKINNY_MAX rows whose metadata is in
 * d_rows and tokens in x: nothing step-specific is passed by value, so this
 * is what a graph captures. Logits of all rows go to lg. */
static int enqueue_step(const sotto_model *m, gws *w, int n, const sotto_cuda_row *d_rows, float *x, float *h,
                        float *q, float *k, float *v, float *att, float *f, float *lg, float *xpart,
                        sotto_err *err) {
    const sotto_gpu_model *g = gmodel(m);
    const sotto_hparams *hp = &m->hp;
    const int d = hp->n_text_state, H = hp->n_text_head, dh = d / H, ff = hp->n_text_ff;
    const float scale = 1.0f / sqrtf((float)dh);
    int rc;
    for (int l = 0; l < hp->n_text_layer; l++) {
        const gdec *L = &g->dec[l];
        if ((rc = sotto_cuda_layer_norm(x, h, n, d, L->attn_ln.g, L->attn_ln.b, 1e-5f, w->stream, err)) ||
            (rc = glinear(w, &L->q, h, n, q, 0, err)) || (rc = glinear(w, &L->k, h, n, k, 0, err)) ||
            (rc = glinear(w, &L->v, h, n, v, 0, err)) ||
            (rc = sotto_cuda_kv_append(k, v, n, d, d_rows, l, w->stream, err)) ||
            (rc = sotto_cuda_attention_self(q, att, n, H, dh, d_rows, l, hp->n_text_ctx, scale, w->stream, err)) ||
            (rc = glinear(w, &L->o, att, n, x, 1, err)) ||
            (rc = sotto_cuda_layer_norm(x, h, n, d, L->cross_ln.g, L->cross_ln.b, 1e-5f, w->stream, err)) ||
            (rc = glinear(w, &L->cq, h, n, q, 0, err)) ||
            (rc = sotto_cuda_attention_cross(q, att, n, H, dh, d_rows, l, hp->n_audio_ctx, scale, xpart, w->stream,
                                             err)) ||
            (rc = glinear(w, &L->co, att, n, x, 1, err)) ||
            (rc = sotto_cuda_layer_norm(x, h, n, d, L->mlp_ln.g, L->mlp_ln.b, 1e-5f, w->stream, err)) ||
            (rc = glinear(w, &L->fc1, h, n, f, 0, err)) || (rc = sotto_cuda_gelu(f, (size_t)n * ff, w->stream, err)) ||
            (rc = glinear(w, &L->fc2, f, n, x, 1, err)))
            return rc;
    }
    glin emb = {g->emb, NULL};
    if ((rc = sotto_cuda_layer_norm(x, h, n, d, g->dec_ln.g, g->dec_ln.b, 1e-5f, w->stream, err)) ||
        (rc = glinear(w, &emb, h, n, lg, 0, err)))
        return rc;
    return SOTTO_OK;
}

/* The graph of (model, n) over the current buffers, captured on first use. */
static cudaGraphExec_t step_graph_get(const sotto_model *m, gws *w, int n, const sotto_cuda_row *d_rows,
                                      float *bufs[9], sotto_err *err) {
    step_graph *slot = NULL;
    w->clock++;
    for (int i = 0; i < MAX_GRAPHS; i++) {
        step_graph *e = &w->graphs[i];
        if (e->exec && e->model_id == gmodel(m)->id && e->n == n && e->gen == w->gen) {
            e->last_used = w->clock;
            return e->exec;
        }
        if (!slot || !e->exec || (slot->exec && e->last_used < slot->last_used)) slot = e;
    }
    if (slot->exec) cudaGraphExecDestroy(slot->exec); /* least recently used, or stale */
    slot->exec = NULL;
    cudaError_t e = cudaStreamBeginCapture(w->stream, cudaStreamCaptureModeThreadLocal);
    if (e != cudaSuccess) {
        cuda_err(err, e, "graph capture");
        return NULL;
    }
    int rc = enqueue_step(m, w, n, d_rows, bufs[0], bufs[1], bufs[2], bufs[3], bufs[4], bufs[5], bufs[6],
                          bufs[7], bufs[8], err);
    cudaGraph_t graph = NULL;
    e = cudaStreamEndCapture(w->stream, &graph); /* always ends the capture */
    if (rc || e != cudaSuccess) {
        if (graph) cudaGraphDestroy(graph);
        if (!rc) cuda_err(err, e, "graph capture");
        return NULL;
    }
    cudaGraphExec_t exec = NULL;
    e = cudaGraphInstantiate(&exec, graph, 0);
    cudaGraphDestroy(graph);
    if (e != cudaSuccess) {
        cuda_err(err, e, "graph instantiate");
        return NULL;
    }
    *slot = (step_graph){gmodel(m)->id, n, w->gen, exec, w->clock};
    return exec;
}

/* One decoder step of n <= SKINNY_MAX rows: metadata and tokens uploaded,
 * then the captured graph (or the same kernels one by one), then logits. */
static int decode_step(const sotto_model *m, gws *w, const sotto_row_ref *rows, int n, const float *x_host,
                       float *logits, sotto_err *err) {
    const sotto_hparams *hp = &m->hp;
    const int d = hp->n_text_state, ff = hp->n_text_ff, V = hp->n_vocab;
    const size_t R = SKINNY_MAX; /* buffers sized once for the largest step, so graphs stay valid */
    const size_t row_floats = (R * sizeof(sotto_cuda_row) + sizeof(float) - 1) / sizeof(float);
    float *b[9];
    float *rows_buf;
    if (!(b[0] = gbuf(w, G_X, R * d, err)) || !(b[1] = gbuf(w, G_H, R * d, err)) ||
        !(b[2] = gbuf(w, G_Q, R * d, err)) || !(b[3] = gbuf(w, G_K, R * d, err)) ||
        !(b[4] = gbuf(w, G_V, R * d, err)) || !(b[5] = gbuf(w, G_ATT, R * d, err)) ||
        !(b[6] = gbuf(w, G_FF, R * ff, err)) || !(b[7] = gbuf(w, G_LOGITS, R * V, err)) ||
        !(b[8] = gbuf(w, G_XPART, sotto_cuda_attention_cross_scratch((int)R, hp->n_text_head, d / hp->n_text_head),
                      err)) ||
        !(rows_buf = gbuf(w, G_ROWS, row_floats, err)))
        return err->code;
    const sotto_cuda_row *d_rows = (const sotto_cuda_row *)rows_buf;
    for (int i = 0; i < n; i++) {
        const sotto_state *st = rows[i].st;
        w->rows_host[i] = (sotto_cuda_row){
            .self_k = sotto_state_self(st, gst(st)->self_k, 0, rows[i].seq),
            .self_v = sotto_state_self(st, gst(st)->self_v, 0, rows[i].seq),
            .cross_k = gst(st)->cross_k,
            .cross_v = gst(st)->cross_v,
            .self_layer_stride = (long long)st->max_seqs * hp->n_text_ctx * d,
            .cross_layer_stride = (long long)hp->n_audio_ctx * d,
            .pos = rows[i].pos,
        };
    }
    cudaError_t e;
    if ((e = cudaMemcpyAsync(b[0], x_host, sizeof(float) * (size_t)n * d, cudaMemcpyHostToDevice, w->stream)) !=
            cudaSuccess ||
        (e = cudaMemcpyAsync(rows_buf, w->rows_host, sizeof(sotto_cuda_row) * (size_t)n, cudaMemcpyHostToDevice,
                             w->stream)) != cudaSuccess)
        return cuda_err(err, e, "decoder step upload");
    int rc;
    if (w->use_graphs) {
        cudaGraphExec_t exec = step_graph_get(m, w, n, d_rows, b, err);
        if (!exec) return err->code ? err->code : SOTTO_E_INTERNAL;
        if ((e = cudaGraphLaunch(exec, w->stream)) != cudaSuccess) return cuda_err(err, e, "graph launch");
    } else if ((rc = enqueue_step(m, w, n, d_rows, b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], err))) {
        return rc;
    }
    if ((e = cudaMemcpyAsync(logits, b[7], sizeof(float) * (size_t)n * V, cudaMemcpyDeviceToHost, w->stream)) !=
            cudaSuccess ||
        (e = cudaStreamSynchronize(w->stream)) != cudaSuccess)
        return cuda_err(err, e, "decoder step");
    return SOTTO_OK;
}

static int cuda_decode(const sotto_model *m, sotto_workspace *ws, const sotto_row_ref *rows, int n,
                       int prompt, float *x_host, const int *want, int n_want, float *logits,
                       sotto_err *err) {
    sotto_err local_err = {0};
    if (!err) err = &local_err;
    const sotto_gpu_model *g = gmodel(m);
    const sotto_hparams *hp = &m->hp;
    const int d = hp->n_text_state, H = hp->n_text_head, dh = d / H, ff = hp->n_text_ff;
    const int T = hp->n_audio_ctx, V = hp->n_vocab;
    const float scale = 1.0f / sqrtf((float)dh);
    gws *w = get_gws(ws, err);
    if (!w) return err->code;
    if (!prompt) { /* steps: rows are independent, so at most SKINNY_MAX at a time */
        if (want || n_want != n) return sotto_err_set(err, SOTTO_E_INVALID, "a decoder step returns every row's logits");
        for (int i = 0; i < n; i += SKINNY_MAX) {
            int c = n - i < SKINNY_MAX ? n - i : SKINNY_MAX, rc;
            if ((rc = decode_step(m, w, rows + i, c, x_host + (size_t)i * d, logits + (size_t)i * V, err)))
                return rc;
        }
        return SOTTO_OK;
    }
    /* a prompt: consecutive positions of one sequence, attending causally */
    const sotto_row_ref *r = &rows[0];
    const size_t nr = (size_t)(n > n_want ? n : n_want); /* rows of h and q */
    float *x = gbuf(w, G_X, (size_t)n * d, err), *h = x ? gbuf(w, G_H, nr * d, err) : NULL;
    float *q = h ? gbuf(w, G_Q, nr * d, err) : NULL, *k = q ? gbuf(w, G_K, (size_t)n * d, err) : NULL;
    float *v = k ? gbuf(w, G_V, (size_t)n * d, err) : NULL;
    float *att = v ? gbuf(w, G_ATT, (size_t)n * d, err) : NULL;
    float *f = att ? gbuf(w, G_FF, (size_t)n * ff, err) : NULL;
    float *lg = f && n_want > 0 ? gbuf(w, G_LOGITS, (size_t)n_want * V, err) : f;
    if (!lg) return err->code;
    int rc;
    if ((rc = sotto_cuda_copy(x, x_host, sizeof(float) * (size_t)n * d, 1, w->stream, err))) return rc;
    const size_t per_layer = (size_t)T * d;
    for (int l = 0; l < hp->n_text_layer; l++) {
        const gdec *L = &g->dec[l];
        /* self-attention: K/V written into the cache, then causal attention */
        if ((rc = sotto_cuda_layer_norm(x, h, n, d, L->attn_ln.g, L->attn_ln.b, 1e-5f, w->stream, err)) ||
            (rc = glinear(w, &L->q, h, n, q, 0, err)) || (rc = glinear(w, &L->k, h, n, k, 0, err)) ||
            (rc = glinear(w, &L->v, h, n, v, 0, err)))
            return rc;
        if ((rc = dcopy(w->stream, self_at(r->st, gst(r->st)->self_k, l, r->seq, r->pos), k, sizeof(float) * (size_t)n * d,
                                 err)) ||
            (rc = dcopy(w->stream, self_at(r->st, gst(r->st)->self_v, l, r->seq, r->pos), v, sizeof(float) * (size_t)n * d,
                                 err)) ||
            (rc = sotto_cuda_attention_causal(q, d, sotto_state_self(r->st, gst(r->st)->self_k, l, r->seq),
                                              sotto_state_self(r->st, gst(r->st)->self_v, l, r->seq), d, att, d, n,
                                              r->pos + n, H, dh, scale, r->pos, w->stream, err)))
            return rc;
        if ((rc = glinear(w, &L->o, att, n, x, 1, err))) return rc;

        /* cross-attention over the sequence's stream */
        if ((rc = sotto_cuda_layer_norm(x, h, n, d, L->cross_ln.g, L->cross_ln.b, 1e-5f, w->stream, err)) ||
            (rc = glinear(w, &L->cq, h, n, q, 0, err)) ||
            (rc = sotto_cuda_attention_rows(q, d, gst(r->st)->cross_k + l * per_layer, gst(r->st)->cross_v + l * per_layer, d,
                                            att, d, n, T, H, dh, scale, w->stream, err)))
            return rc;
        if ((rc = glinear(w, &L->co, att, n, x, 1, err))) return rc;

        /* MLP */
        if ((rc = sotto_cuda_layer_norm(x, h, n, d, L->mlp_ln.g, L->mlp_ln.b, 1e-5f, w->stream, err)) ||
            (rc = glinear(w, &L->fc1, h, n, f, 0, err)) || (rc = sotto_cuda_gelu(f, (size_t)n * ff, w->stream, err)) ||
            (rc = glinear(w, &L->fc2, f, n, x, 1, err)))
            return rc;
    }
    if (n_want > 0) {
        const float *sel = x;
        if (want) { /* gather the wanted rows into q */
            for (int i = 0; i < n_want; i++)
                if ((rc = dcopy(w->stream, q + (size_t)i * d, x + (size_t)want[i] * d, sizeof(float) * d, err)))
                    return rc;
            sel = q;
        }
        glin emb = {g->emb, NULL};
        if ((rc = sotto_cuda_layer_norm(sel, h, n_want, d, g->dec_ln.g, g->dec_ln.b, 1e-5f, w->stream, err)) ||
            (rc = glinear(w, &emb, h, n_want, lg, 0, err)) ||
            (rc = sotto_cuda_copy(logits, lg, sizeof(float) * (size_t)n_want * V, 0, w->stream, err)))
            return rc;
    }
    cudaError_t e = cudaStreamSynchronize(w->stream);
    return e == cudaSuccess ? SOTTO_OK : cuda_err(err, e, "decoder");
}

/* ---- the table ---------------------------------------------------------- */

static const sotto_backend k_cuda = {
    .name = "cuda",
    .model_upload = cuda_model_upload,
    .model_free = cuda_model_free,
    .model_part_bytes = cuda_model_part_bytes,
    .state_alloc = cuda_state_alloc,
    .state_free = cuda_state_free,
    .state_fetch_encoder_output = cuda_state_fetch_encoder_output,
    .seq_gather = cuda_seq_gather,
    .encode_batch = cuda_encode_batch,
    .decode = cuda_decode,
    .ws_free = cuda_ws_free,
};

const sotto_backend *sotto_backend_cuda(void) { return &k_cuda; }
