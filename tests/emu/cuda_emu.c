/* cuda_emu.c - the CUDA backend's device interface emulated on the CPU, so
 * that engine/gpu_cuda.c (the GPU forward pass: buffer sizes, strides, the
 * column-major cuBLAS calls, K/V cache writes, beams) runs and is checked
 * against the CPU engine on a machine without a GPU.
 *
 * Built only with -DSOTTO_CUDA_EMU=ON (scripts/test.sh does, under ASan and
 * UBSan). It stands in for three things:
 *   - the kernels of kernels/cuda/ (cuda_linear.h, cuda_ops.h, and
 *     cuda_internal.h under kernels/cuda/upload.c, which runs as is), each
 *     computed by its plain-C twin from kernels/;
 *   - the CUDA runtime calls gpu_cuda.c makes (tests/emu/include/);
 *   - cuBLAS's Sgemm, SgemmStridedBatched and Sgeam, through CBLAS in
 *     column-major order (the same contract as cuBLAS).
 *
 * "Device" memory is host memory that this file hands out and records.
 * Every kernel and copy checks that each pointer it is given lies inside
 * one recorded device allocation (whole extent, strides included), and that
 * host-side pointers of copies do not: passing a host buffer where the GPU
 * needs a device one (or reading past a device buffer) aborts with a message
 * instead of passing silently. What it cannot check: the kernels themselves
 * (tests/gpu/ does that on a GPU), timing, and stream ordering.
 */
#define _POSIX_C_SOURCE 200809L
#include "cuda_internal.h"
#include "cuda_linear.h"
#include "cuda_ops.h"
#include "ops.h"

#include <cblas.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- device allocations --------------------------------------------- */

typedef struct alloc {
    char *p;
    size_t n;
} alloc;

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static alloc *g_allocs;
static size_t g_n, g_cap, g_bytes;

static void die(const char *what, const void *p, size_t bytes) {
    fprintf(stderr, "cuda_emu: %s: %zu bytes at %p are not inside one device allocation\n", what,
            bytes, p);
    abort();
}

/* 1 if [p, p + bytes) lies inside one device allocation. */
static int is_dev(const void *p, size_t bytes) {
    const char *c = p;
    int ok = 0;
    pthread_mutex_lock(&g_lock);
    for (size_t i = 0; i < g_n && !ok; i++)
        ok = c >= g_allocs[i].p && c + bytes <= g_allocs[i].p + g_allocs[i].n;
    pthread_mutex_unlock(&g_lock);
    return ok;
}

static void dev(const void *p, size_t bytes, const char *what) {
    if (bytes && !is_dev(p, bytes)) die(what, p, bytes);
}

static void host(const void *p, size_t bytes, const char *what) {
    if (bytes && is_dev(p, 1)) {
        fprintf(stderr, "cuda_emu: %s: %p is device memory where host memory is expected\n", what, p);
        abort();
    }
}

/* Floats spanned by `rows` rows of `width` floats, `stride` apart. */
static size_t span(int rows, int stride, int width) {
    return rows <= 0 || width <= 0 ? 0 : ((size_t)(rows - 1) * (size_t)stride + (size_t)width) * 4;
}

void *sotto_cuda_malloc(size_t bytes, sotto_err *err) {
    char *p = malloc(bytes ? bytes : 1);
    pthread_mutex_lock(&g_lock);
    if (p && g_n == g_cap) {
        size_t nc = g_cap ? 2 * g_cap : 256;
        alloc *a = realloc(g_allocs, nc * sizeof *a);
        if (!a) {
            free(p);
            p = NULL;
        } else {
            g_allocs = a, g_cap = nc;
        }
    }
    if (p) {
        g_allocs[g_n++] = (alloc){p, bytes ? bytes : 1};
        g_bytes += bytes;
    }
    pthread_mutex_unlock(&g_lock);
    if (!p) sotto_err_set(err, SOTTO_E_NOMEM, "cuda_emu: out of memory for %zu bytes", bytes);
    return p;
}

void sotto_cuda_free(void *p) {
    if (!p) return;
    pthread_mutex_lock(&g_lock);
    size_t i = 0;
    while (i < g_n && g_allocs[i].p != p) i++;
    if (i == g_n) {
        pthread_mutex_unlock(&g_lock);
        fprintf(stderr, "cuda_emu: freeing %p, which is not a device allocation\n", p);
        abort();
    }
    g_bytes -= g_allocs[i].n;
    g_allocs[i] = g_allocs[--g_n];
    pthread_mutex_unlock(&g_lock);
    free(p);
}

int sotto_cuda_copy(void *dst, const void *src, size_t bytes, int to_device, sotto_err *err) {
    if (to_device) dev(dst, bytes, "copy to device (dst)"), host(src, bytes, "copy to device (src)");
    else dev(src, bytes, "copy to host (src)"), host(dst, bytes, "copy to host (dst)");
    memcpy(dst, src, bytes);
    return SOTTO_OK;
}

int sotto_cuda_available(char *name, size_t name_sz, char *why, size_t why_sz) {
    snprintf(name, name_sz, "CPU emulation of the CUDA backend (tests/emu)");
    if (why_sz) why[0] = 0;
    return 1;
}

int sotto_cuda_sync(sotto_err *err) { return SOTTO_OK; }

/* ---- the CUDA runtime ------------------------------------------------ */

const char *cudaGetErrorString(cudaError_t e) { return e == cudaSuccess ? "no error" : "emulated error"; }

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind,
                            cudaStream_t stream) {
    (void)stream;
    if (kind != cudaMemcpyDeviceToDevice) return cudaErrorInvalidValue; /* gpu_cuda.c uses D2D only */
    dev(dst, bytes, "device copy (dst)");
    dev(src, bytes, "device copy (src)");
    memmove(dst, src, bytes);
    return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void) { return cudaSuccess; }

cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total_bytes) {
    pthread_mutex_lock(&g_lock);
    *total_bytes = (size_t)1 << 40;
    *free_bytes = *total_bytes - g_bytes;
    pthread_mutex_unlock(&g_lock);
    return cudaSuccess;
}

/* ---- cuBLAS ------------------------------------------------------------ */

struct cublasContext {
    int mode;
};

cublasStatus_t cublasCreate(cublasHandle_t *h) {
    *h = calloc(1, sizeof **h);
    return *h ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_NOT_INITIALIZED;
}

cublasStatus_t cublasDestroy(cublasHandle_t h) {
    free(h);
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetMathMode(cublasHandle_t h, cublasMath_t mode) {
    h->mode = (int)mode;
    return CUBLAS_STATUS_SUCCESS;
}

/* Bytes spanned by a column-major matrix of `rows` x `cols` with leading
 * dimension ld (ld >= rows, as cuBLAS demands). */
static size_t cm_span(int rows, int cols, int ld) {
    if (ld < rows) return (size_t)-1;
    return span(cols, ld, rows);
}

static cublasStatus_t gemm_check(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                                 const float *A, int lda, const float *B, int ldb, const float *C,
                                 int ldc) {
    size_t a = ta == CUBLAS_OP_N ? cm_span(m, k, lda) : cm_span(k, m, lda);
    size_t b = tb == CUBLAS_OP_N ? cm_span(k, n, ldb) : cm_span(n, k, ldb);
    size_t c = cm_span(m, n, ldc);
    if (a == (size_t)-1 || b == (size_t)-1 || c == (size_t)-1) return CUBLAS_STATUS_INVALID_VALUE;
    dev(A, a, "sgemm A");
    dev(B, b, "sgemm B");
    dev(C, c, "sgemm C");
    return CUBLAS_STATUS_SUCCESS;
}

static enum CBLAS_TRANSPOSE tr(cublasOperation_t t) { return t == CUBLAS_OP_N ? CblasNoTrans : CblasTrans; }

cublasStatus_t cublasSgemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                           int k, const float *alpha, const float *A, int lda, const float *B, int ldb,
                           const float *beta, float *C, int ldc) {
    cublasStatus_t s = gemm_check(ta, tb, m, n, k, A, lda, B, ldb, C, ldc);
    if (s) return s;
    cblas_sgemm(CblasColMajor, tr(ta), tr(tb), m, n, k, *alpha, A, lda, B, ldb, *beta, C, ldc);
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb,
                                         int m, int n, int k, const float *alpha, const float *A,
                                         int lda, long long sa, const float *B, int ldb, long long sb,
                                         const float *beta, float *C, int ldc, long long sc, int batch) {
    for (int i = 0; i < batch; i++) {
        cublasStatus_t s = cublasSgemm(h, ta, tb, m, n, k, alpha, A + i * sa, lda, B + i * sb, ldb, beta,
                                       C + i * sc, ldc);
        if (s) return s;
    }
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSgeam(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                           const float *alpha, const float *A, int lda, const float *beta,
                           const float *B, int ldb, float *C, int ldc) {
    size_t a = ta == CUBLAS_OP_N ? cm_span(m, n, lda) : cm_span(n, m, lda);
    size_t c = cm_span(m, n, ldc);
    if (a == (size_t)-1 || c == (size_t)-1) return CUBLAS_STATUS_INVALID_VALUE;
    dev(A, a, "sgeam A");
    dev(C, c, "sgeam C");
    if (*beta != 0.0f) {
        size_t b = tb == CUBLAS_OP_N ? cm_span(m, n, ldb) : cm_span(n, m, ldb);
        if (b == (size_t)-1) return CUBLAS_STATUS_INVALID_VALUE;
        dev(B, b, "sgeam B");
    }
    if (A == C) return CUBLAS_STATUS_INVALID_VALUE; /* cuBLAS: in place only for C == B */
    for (int j = 0; j < n; j++)
        for (int i = 0; i < m; i++) {
            float av = ta == CUBLAS_OP_N ? A[i + (size_t)j * lda] : A[j + (size_t)i * lda];
            float v = *alpha * av;
            if (*beta != 0.0f) v += *beta * (tb == CUBLAS_OP_N ? B[i + (size_t)j * ldb] : B[j + (size_t)i * ldb]);
            C[i + (size_t)j * ldc] = v;
        }
    return CUBLAS_STATUS_SUCCESS;
}

/* ---- weight matrices (kernels/cuda/upload.c calls these) ------------- */

struct sotto_cuda_wmat {
    sotto_wmat w; /* data and scales point at device allocations */
    size_t bytes;
};

int sotto__cuda_set_tables(const float *tables, sotto_err *err) { return SOTTO_OK; }

sotto_cuda_wmat *sotto__cuda_wmat_new(sotto_wfmt fmt, int rows, int cols, float global_scale,
                                      const void *data, size_t data_bytes, const void *scales,
                                      size_t scale_bytes, sotto_err *err) {
    sotto_cuda_wmat *w = calloc(1, sizeof *w);
    if (!w) {
        sotto_err_set(err, SOTTO_E_NOMEM, "out of memory");
        return NULL;
    }
    void *d = sotto_cuda_malloc(data_bytes, err), *s = NULL;
    if (d && scale_bytes) s = sotto_cuda_malloc(scale_bytes, err);
    if (!d || (scale_bytes && !s)) {
        sotto_cuda_free(d);
        free(w);
        return NULL;
    }
    memcpy(d, data, data_bytes);
    if (scale_bytes) memcpy(s, scales, scale_bytes);
    w->w = (sotto_wmat){.fmt = fmt, .rows = rows, .cols = cols, .data = d, .scales = s,
                        .nf4_dq = NULL, .global_scale = global_scale};
    w->bytes = data_bytes + scale_bytes;
    return w;
}

void sotto_cuda_wmat_free(sotto_cuda_wmat *w) {
    if (!w) return;
    sotto_cuda_free((void *)w->w.data);
    sotto_cuda_free((void *)w->w.scales);
    free(w);
}

size_t sotto_cuda_wmat_bytes(const sotto_cuda_wmat *w) { return w ? w->bytes : 0; }
int sotto_cuda_wmat_rows(const sotto_cuda_wmat *w) { return w->w.rows; }
int sotto_cuda_wmat_cols(const sotto_cuda_wmat *w) { return w->w.cols; }
sotto_wfmt sotto_cuda_wmat_fmt(const sotto_cuda_wmat *w) { return w->w.fmt; }
const float *sotto_cuda_wmat_f32(const sotto_cuda_wmat *w) {
    return w->w.fmt == SOTTO_WFMT_F32 ? w->w.data : NULL;
}

int sotto_cuda_wmat_dequant(const sotto_cuda_wmat *w, float *dst, sotto_err *err) {
    dev(dst, (size_t)w->w.rows * w->w.cols * 4, "dequant dst");
    sotto_wmat_dequantize_rows(&w->w, 0, w->w.rows, dst);
    return SOTTO_OK;
}

int sotto_cuda_linear_async(const sotto_cuda_wmat *w, const float *bias, const float *x, int n, float *y,
                            sotto_err *err) {
    if (n <= 0) return SOTTO_OK;
    dev(x, (size_t)n * w->w.cols * 4, "linear x");
    dev(y, (size_t)n * w->w.rows * 4, "linear y");
    if (bias) dev(bias, (size_t)w->w.rows * 4, "linear bias");
    sotto_linear(&w->w, bias, x, n, y);
    return SOTTO_OK;
}

int sotto_cuda_linear(const sotto_cuda_wmat *w, const float *bias, const float *x, int n, float *y,
                      sotto_err *err) {
    return sotto_cuda_linear_async(w, bias, x, n, y, err);
}

/* ---- cuda_ops.h ------------------------------------------------------ */

int sotto_cuda_layer_norm(const float *x, float *y, int n, int d, const float *gamma, const float *beta,
                          float eps, sotto_err *err) {
    dev(x, span(n, d, d), "layer_norm x");
    dev(y, span(n, d, d), "layer_norm y");
    dev(gamma, span(1, d, d), "layer_norm gamma");
    dev(beta, span(1, d, d), "layer_norm beta");
    sotto_layer_norm(x, y, n, d, gamma, beta, eps);
    return SOTTO_OK;
}

int sotto_cuda_gelu(float *x, size_t n, sotto_err *err) {
    dev(x, n * 4, "gelu");
    sotto_gelu(x, n);
    return SOTTO_OK;
}

int sotto_cuda_softmax_rows(float *x, int n, int d, sotto_err *err) {
    dev(x, span(n, d, d), "softmax");
    sotto_softmax_rows(x, n, d);
    return SOTTO_OK;
}

int sotto_cuda_add_bias_rows(float *x, const float *b, int n, int d, sotto_err *err) {
    dev(x, span(n, d, d), "add_bias_rows x");
    dev(b, span(1, d, d), "add_bias_rows b");
    sotto_add_bias_rows(x, b, n, d);
    return SOTTO_OK;
}

int sotto_cuda_add(float *y, const float *x, size_t n, sotto_err *err) {
    dev(y, n * 4, "add y");
    dev(x, n * 4, "add x");
    for (size_t i = 0; i < n; i++) y[i] += x[i];
    return SOTTO_OK;
}

int sotto_cuda_im2col_k3(const float *x, int t_in, int c_in, int stride, float *cols, sotto_err *err) {
    if (t_in <= 0 || c_in <= 0 || stride <= 0)
        return sotto_err_set(err, SOTTO_E_INVALID, "cuda im2col: t_in %d, c_in %d, stride %d", t_in, c_in, stride);
    const int t_out = (t_in - 1) / stride + 1, kc = c_in * 3;
    dev(x, span(t_in, c_in, c_in), "im2col x");
    dev(cols, span(t_out, kc, kc), "im2col cols");
    for (int t = 0; t < t_out; t++)
        for (int c = 0; c < c_in; c++)
            for (int j = 0; j < 3; j++) {
                int ti = t * stride - 1 + j;
                cols[(size_t)t * kc + c * 3 + j] = ti < 0 || ti >= t_in ? 0.f : x[(size_t)ti * c_in + c];
            }
    return SOTTO_OK;
}

static int attn_check(const float *q, int q_stride, const float *k, const float *v, int kv_stride,
                      const float *out, int out_stride, int nr, int n_kv, int n_head, int dh,
                      sotto_err *err) {
    if (n_kv <= 0 || dh <= 0 || dh > 256)
        return sotto_err_set(err, SOTTO_E_INVALID, "cuda attention: n_kv %d, dh %d (1..256)", n_kv, dh);
    dev(q, span(nr, q_stride, n_head * dh), "attention q");
    dev(k, span(n_kv, kv_stride, n_head * dh), "attention k");
    dev(v, span(n_kv, kv_stride, n_head * dh), "attention v");
    dev(out, span(nr, out_stride, n_head * dh), "attention out");
    return SOTTO_OK;
}

int sotto_cuda_attention_rows(const float *q, int q_stride, const float *k, const float *v, int kv_stride,
                              float *out, int out_stride, int nr, int n_kv, int n_head, int dh, float scale,
                              sotto_err *err) {
    if (nr <= 0 || n_head <= 0) return SOTTO_OK;
    int rc = attn_check(q, q_stride, k, v, kv_stride, out, out_stride, nr, n_kv, n_head, dh, err);
    if (rc) return rc;
    float *s = malloc(sizeof(float) * (size_t)nr * n_kv);
    if (!s) return sotto_err_set(err, SOTTO_E_NOMEM, "out of memory");
    for (int h = 0; h < n_head; h++)
        sotto_attention_rows(q + h * dh, q_stride, k + h * dh, v + h * dh, kv_stride, out + h * dh, out_stride,
                             nr, n_kv, dh, scale, s);
    free(s);
    return SOTTO_OK;
}

int sotto_cuda_attention_causal(const float *q, int q_stride, const float *k, const float *v, int kv_stride,
                                float *out, int out_stride, int nr, int n_kv, int n_head, int dh, float scale,
                                int q_pos0, sotto_err *err) {
    if (q_pos0 < 0 || n_kv < q_pos0 + nr)
        return sotto_err_set(err, SOTTO_E_INVALID, "cuda causal attention: %d keys for rows at %d..%d", n_kv,
                             q_pos0, q_pos0 + nr - 1);
    if (nr <= 0 || n_head <= 0) return SOTTO_OK;
    int rc = attn_check(q, q_stride, k, v, kv_stride, out, out_stride, nr, n_kv, n_head, dh, err);
    if (rc) return rc;
    float *s = malloc(sizeof(float) * sotto_attention_scratch(nr, n_kv));
    if (!s) return sotto_err_set(err, SOTTO_E_NOMEM, "out of memory");
    sotto_attention(q, q_stride, k, v, kv_stride, out, out_stride, nr, n_kv, n_head, dh, scale, 1, q_pos0, s);
    free(s);
    return SOTTO_OK;
}
