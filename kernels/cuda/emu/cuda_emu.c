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
 *   - the CUDA runtime calls gpu_cuda.c makes (kernels/cuda/emu/include/);
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
#include "cublas_lazy.h"
#include "cuda_internal.h"
#include "cuda_linear.h"
#include "cuda_ops.h"
#include "half.h"
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

/* ---- graphs: recorded kernel calls ------------------------------------ */

typedef void (*emu_fn)(const void *args);

typedef struct emu_op {
    emu_fn fn;
    unsigned char args[160];
} emu_op;

struct CUgraph_st {
    emu_op *ops;
    size_t n, cap;
};

struct CUgraphExec_st {
    struct CUgraph_st g;
};

/* A stream: work queued on it runs at once (the emulation is synchronous),
   or is recorded into the graph while the stream is being captured. */
struct CUstream_st {
    struct CUgraph_st *capture;
};

/* The stream this thread is capturing (cudaStreamCaptureModeThreadLocal: while
   it does, the thread may not wait, copy to or from host memory, or queue
   work on another stream: the work would be missing from the graph). This
   models CUDA's own per-thread capture rule; sotto passes its streams. */
static __thread struct CUstream_st *tl_capturing;

static void no_capture(const char *what) {
    if (tl_capturing) {
        fprintf(stderr, "cuda_emu: %s during a stream capture\n", what);
        abort();
    }
}

/* Runs fn(args) for work queued on `stream`, or records it while that stream
   is captured. */
static int launch(struct CUstream_st *stream, emu_fn fn, const void *args, size_t size) {
    if (size > sizeof(((emu_op *)0)->args)) {
        fprintf(stderr, "cuda_emu: %zu bytes of kernel arguments\n", size);
        abort();
    }
    if (tl_capturing && stream != tl_capturing) {
        fprintf(stderr,
                "cuda_emu: work queued on stream %p while this thread captures stream %p: it would be missing "
                "from the graph\n",
                (void *)stream, (void *)tl_capturing);
        abort();
    }
    if (!stream || !stream->capture) {
        fn(args);
        return SOTTO_OK;
    }
    struct CUgraph_st *g = stream->capture;
    if (g->n == g->cap) {
        size_t nc = g->cap ? 2 * g->cap : 64;
        emu_op *o = realloc(g->ops, nc * sizeof *o);
        if (!o) return SOTTO_E_NOMEM;
        g->ops = o, g->cap = nc;
    }
    g->ops[g->n].fn = fn;
    memcpy(g->ops[g->n].args, args, size);
    g->n++;
    return SOTTO_OK;
}

#define LAUNCH(stream, fn, a) launch(stream, fn, &(a), sizeof(a))

/* SOTTO_EMU_VRAM_MB: the emulated device's memory (default: unlimited), to
 * test how running out of GPU memory is reported. */
static size_t vram_limit(void) {
    static size_t limit = (size_t)-2;
    if (limit == (size_t)-2) {
        const char *v = getenv("SOTTO_EMU_VRAM_MB");
        limit = v && *v ? (size_t)strtoull(v, NULL, 10) << 20 : (size_t)-1;
    }
    return limit;
}

void *sotto_cuda_malloc(size_t bytes, sotto_err *err) {
    pthread_mutex_lock(&g_lock);
    int over = g_bytes + bytes > vram_limit();
    pthread_mutex_unlock(&g_lock);
    if (over) {
        sotto_err_set(err, SOTTO_E_NOMEM, "GPU out of memory allocating %.1f MiB", bytes / 1048576.0);
        return NULL;
    }
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

int sotto_cuda_copy(void *dst, const void *src, size_t bytes, int to_device, sotto_cuda_stream stream,
                    sotto_err *err) {
    (void)stream; /* queued and waited for: done now */
    no_capture("a synchronous copy");
    if (to_device) dev(dst, bytes, "copy to device (dst)"), host(src, bytes, "copy to device (src)");
    else dev(src, bytes, "copy to host (src)"), host(dst, bytes, "copy to host (dst)");
    memcpy(dst, src, bytes);
    return SOTTO_OK;
}

int sotto_cuda_available(char *name, size_t name_sz, char *why, size_t why_sz) {
    snprintf(name, name_sz, "CPU emulation of the CUDA backend (kernels/cuda/emu)");
    if (why_sz) why[0] = 0;
    return 1;
}

int sotto_cuda_sync(sotto_cuda_stream stream, sotto_err *err) {
    (void)stream;
    no_capture("sotto_cuda_sync");
    return SOTTO_OK;
}

/* ---- the CUDA runtime ------------------------------------------------ */

const char *cudaGetErrorString(cudaError_t e) { return e == cudaSuccess ? "no error" : "emulated error"; }

typedef struct copy_args {
    void *dst;
    const void *src;
    size_t bytes;
} copy_args;

static void run_copy(const void *p) {
    const copy_args *a = p;
    memmove(a->dst, a->src, a->bytes);
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind,
                            cudaStream_t stream) {
    switch (kind) {
    case cudaMemcpyDeviceToDevice:
        dev(dst, bytes, "device copy (dst)"), dev(src, bytes, "device copy (src)");
        break;
    case cudaMemcpyHostToDevice:
        dev(dst, bytes, "copy to device (dst)"), host(src, bytes, "copy to device (src)");
        no_capture("a copy from host memory");
        break;
    case cudaMemcpyDeviceToHost:
        dev(src, bytes, "copy to host (src)"), host(dst, bytes, "copy to host (dst)");
        no_capture("a copy to host memory");
        break;
    default: return cudaErrorInvalidValue;
    }
    copy_args a = {dst, src, bytes};
    return LAUNCH(stream, run_copy, a) ? cudaErrorMemoryAllocation : cudaSuccess;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *stream, unsigned int flags) {
    *stream = calloc(1, sizeof **stream);
    return *stream ? cudaSuccess : cudaErrorMemoryAllocation;
}

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
    if (stream && stream->capture) return cudaErrorInvalidValue; /* still capturing */
    free(stream);
    return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
    no_capture("cudaStreamSynchronize");
    return cudaSuccess;
}

cudaError_t cudaStreamBeginCapture(cudaStream_t stream, enum cudaStreamCaptureMode mode) {
    if (tl_capturing || !stream) return cudaErrorInvalidValue; /* the legacy stream cannot capture */
    stream->capture = calloc(1, sizeof *stream->capture);
    if (!stream->capture) return cudaErrorMemoryAllocation;
    tl_capturing = stream;
    return cudaSuccess;
}

cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t *graph) {
    if (!stream || stream != tl_capturing) return cudaErrorInvalidValue; /* not capturing, or another thread's */
    *graph = stream->capture;
    stream->capture = NULL;
    tl_capturing = NULL;
    return cudaSuccess;
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t *exec, cudaGraph_t graph, unsigned long long flags) {
    struct CUgraphExec_st *e = calloc(1, sizeof *e);
    if (!e) return cudaErrorMemoryAllocation;
    e->g.ops = malloc(sizeof(emu_op) * (graph->n ? graph->n : 1));
    if (!e->g.ops) {
        free(e);
        return cudaErrorMemoryAllocation;
    }
    memcpy(e->g.ops, graph->ops, sizeof(emu_op) * graph->n);
    e->g.n = e->g.cap = graph->n;
    *exec = e;
    return cudaSuccess;
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream) {
    no_capture("cudaGraphLaunch");
    for (size_t i = 0; i < exec->g.n; i++) exec->g.ops[i].fn(exec->g.ops[i].args);
    return cudaSuccess;
}

cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
    if (graph) free(graph->ops);
    free(graph);
    return cudaSuccess;
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
    if (exec) free(exec->g.ops);
    free(exec);
    return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void) {
    no_capture("cudaDeviceSynchronize");
    return cudaSuccess;
}

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
    /* GemmEx's float copies of bf16 operands, kept between calls (grown as
       needed, freed by cublasDestroy): a malloc and free of each operand per
       call cost the ASan build ~2.5 million page faults per whole clip */
    pthread_mutex_t lock;
    float *wide[2];
    size_t wide_n[2];
};

/* The real build opens libcublas on first use (cublas_lazy.c); here it is
   always there. */
int sotto_cublas_load(char *why, size_t why_sz) {
    (void)why;
    (void)why_sz;
    return 1;
}

const char *sotto_cublas_path(void) { return "(the CPU emulation)"; }

cublasStatus_t cublasCreate(cublasHandle_t *h) {
    *h = calloc(1, sizeof **h);
    if (!*h) return CUBLAS_STATUS_NOT_INITIALIZED;
    pthread_mutex_init(&(*h)->lock, NULL);
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasDestroy(cublasHandle_t h) {
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    pthread_mutex_destroy(&h->lock);
    free(h->wide[0]);
    free(h->wide[1]);
    free(h);
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetStream(cublasHandle_t h, cudaStream_t stream) {
    (void)h, (void)stream;
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
    no_capture("cuBLAS");
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
    no_capture("cuBLAS");
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

/* bf16 inputs: A and B converted to float (into the handle's buffer `slot`,
   under its lock), then Sgemm's arithmetic; a float operand is used as it is. */
static const float *widen(cublasHandle_t h, int slot, const void *p, cudaDataType t, size_t elems) {
    if (t != CUDA_R_16BF) return p;
    if (h->wide_n[slot] < elems) {
        free(h->wide[slot]);
        h->wide[slot] = malloc(sizeof(float) * elems);
        if (!h->wide[slot]) abort();
        h->wide_n[slot] = elems;
    }
    float *f = h->wide[slot];
    for (size_t i = 0; i < elems; i++) f[i] = sotto_bf16_to_f32(((const uint16_t *)p)[i]);
    return f;
}

cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                            const void *alpha, const void *A, cudaDataType at, int lda, const void *B,
                            cudaDataType bt, int ldb, const void *beta, void *C, cudaDataType ct, int ldc,
                            cublasComputeType_t compute, cublasGemmAlgo_t algo) {
    no_capture("cuBLAS");
    if (ct != CUDA_R_32F || compute != CUBLAS_COMPUTE_32F || (at != CUDA_R_32F && at != CUDA_R_16BF) ||
        (bt != CUDA_R_32F && bt != CUDA_R_16BF))
        return CUBLAS_STATUS_INVALID_VALUE;
    size_t a = ta == CUBLAS_OP_N ? cm_span(m, k, lda) : cm_span(k, m, lda);
    size_t b = tb == CUBLAS_OP_N ? cm_span(k, n, ldb) : cm_span(n, k, ldb);
    size_t c = cm_span(m, n, ldc);
    if (a == (size_t)-1 || b == (size_t)-1 || c == (size_t)-1) return CUBLAS_STATUS_INVALID_VALUE;
    size_t ea = a / 4, eb = b / 4; /* elements spanned */
    dev(A, ea * (at == CUDA_R_16BF ? 2 : 4), "gemmEx A");
    dev(B, eb * (bt == CUDA_R_16BF ? 2 : 4), "gemmEx B");
    dev(C, c, "gemmEx C");
    pthread_mutex_lock(&h->lock);
    const float *fa = widen(h, 0, A, at, ea), *fb = widen(h, 1, B, bt, eb);
    cblas_sgemm(CblasColMajor, tr(ta), tr(tb), m, n, k, *(const float *)alpha, fa, lda, fb, ldb,
                *(const float *)beta, C, ldc);
    pthread_mutex_unlock(&h->lock);
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                                          int n, int k, const void *alpha, const void *A, cudaDataType at,
                                          int lda, long long sa, const void *B, cudaDataType bt, int ldb,
                                          long long sb, const void *beta, void *C, cudaDataType ct, int ldc,
                                          long long sc, int batch, cublasComputeType_t compute,
                                          cublasGemmAlgo_t algo) {
    size_t za = at == CUDA_R_16BF ? 2 : 4, zb = bt == CUDA_R_16BF ? 2 : 4;
    for (int i = 0; i < batch; i++) {
        cublasStatus_t s = cublasGemmEx(h, ta, tb, m, n, k, alpha, (const char *)A + i * sa * za, at, lda,
                                        (const char *)B + i * sb * zb, bt, ldb, beta, (float *)C + i * sc, ct,
                                        ldc, compute, algo);
        if (s) return s;
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

typedef struct dequant_args {
    const sotto_cuda_wmat *w;
    float *dst;
} dequant_args;

static void run_dequant(const void *p) {
    const dequant_args *a = p;
    dev(a->dst, (size_t)a->w->w.rows * a->w->w.cols * 4, "dequant dst");
    sotto_wmat_dequantize_rows(&a->w->w, 0, a->w->w.rows, a->dst);
}

int sotto_cuda_wmat_dequant(const sotto_cuda_wmat *w, float *dst, sotto_cuda_stream stream, sotto_err *err) {
    dequant_args a = {w, dst};
    return LAUNCH(stream, run_dequant, a);
}

typedef struct bf16_args {
    const sotto_cuda_wmat *w;
    const float *x;
    uint16_t *dst;
    size_t n;
} bf16_args;

static void run_dequant_bf16(const void *p) {
    const bf16_args *a = p;
    size_t n = (size_t)a->w->w.rows * a->w->w.cols;
    dev(a->dst, n * 2, "dequant_bf16 dst");
    float *row = malloc(sizeof(float) * (size_t)a->w->w.cols);
    if (!row) abort();
    for (int r = 0; r < a->w->w.rows; r++) {
        sotto_wmat_dequantize_rows(&a->w->w, r, 1, row);
        for (int c = 0; c < a->w->w.cols; c++) a->dst[(size_t)r * a->w->w.cols + c] = sotto_f32_to_bf16(row[c]);
    }
    free(row);
}

int sotto_cuda_wmat_dequant_bf16(const sotto_cuda_wmat *w, uint16_t *dst, sotto_cuda_stream stream, sotto_err *err) {
    bf16_args a = {w, NULL, dst, 0};
    return LAUNCH(stream, run_dequant_bf16, a);
}

const uint16_t *sotto_cuda_wmat_bf16(const sotto_cuda_wmat *w) {
    return w->w.fmt == SOTTO_WFMT_BF16 ? w->w.data : NULL;
}

static void run_to_bf16(const void *p) {
    const bf16_args *a = p;
    dev(a->x, a->n * 4, "f32_to_bf16 x");
    dev(a->dst, a->n * 2, "f32_to_bf16 y");
    for (size_t i = 0; i < a->n; i++) a->dst[i] = sotto_f32_to_bf16(a->x[i]);
}

int sotto_cuda_f32_to_bf16(const float *x, uint16_t *y, size_t n, sotto_cuda_stream stream, sotto_err *err) {
    if (!n) return SOTTO_OK;
    bf16_args a = {NULL, x, y, n};
    return LAUNCH(stream, run_to_bf16, a);
}

typedef struct linear_args {
    const sotto_cuda_wmat *w;
    const float *bias, *x;
    int n, acc;
    float *y;
} linear_args;

static void run_linear(const void *p) {
    const linear_args *a = p;
    const sotto_wmat *w = &a->w->w;
    dev(a->x, (size_t)a->n * w->cols * 4, "linear x");
    dev(a->y, (size_t)a->n * w->rows * 4, "linear y");
    if (a->bias) dev(a->bias, (size_t)w->rows * 4, "linear bias");
    if (a->acc) sotto_linear_acc(w, a->bias, a->x, a->n, a->y);
    else sotto_linear(w, a->bias, a->x, a->n, a->y);
}

int sotto_cuda_linear_async(const sotto_cuda_wmat *w, const float *bias, const float *x, int n, float *y,
                            sotto_cuda_stream stream, sotto_err *err) {
    if (n <= 0) return SOTTO_OK;
    linear_args a = {w, bias, x, n, 0, y};
    return LAUNCH(stream, run_linear, a);
}

int sotto_cuda_linear_acc_async(const sotto_cuda_wmat *w, const float *bias, const float *x, int n, float *y,
                                sotto_cuda_stream stream, sotto_err *err) {
    if (n <= 0) return SOTTO_OK;
    linear_args a = {w, bias, x, n, 1, y};
    return LAUNCH(stream, run_linear, a);
}

int sotto_cuda_linear(const sotto_cuda_wmat *w, const float *bias, const float *x, int n, float *y,
                      sotto_cuda_stream stream, sotto_err *err) {
    no_capture("sotto_cuda_linear (it waits)");
    return sotto_cuda_linear_async(w, bias, x, n, y, stream, err);
}

/* ---- cuda_ops.h ------------------------------------------------------ */

typedef struct ln_args {
    const float *x, *gamma, *beta;
    float *y;
    int n, d;
    float eps;
} ln_args;

static void run_ln(const void *p) {
    const ln_args *a = p;
    dev(a->x, span(a->n, a->d, a->d), "layer_norm x");
    dev(a->y, span(a->n, a->d, a->d), "layer_norm y");
    dev(a->gamma, span(1, a->d, a->d), "layer_norm gamma");
    dev(a->beta, span(1, a->d, a->d), "layer_norm beta");
    sotto_layer_norm(a->x, a->y, a->n, a->d, a->gamma, a->beta, a->eps);
}

int sotto_cuda_layer_norm(const float *x, float *y, int n, int d, const float *gamma, const float *beta,
                          float eps, sotto_cuda_stream stream, sotto_err *err) {
    if (n <= 0 || d <= 0) return SOTTO_OK;
    ln_args a = {x, gamma, beta, y, n, d, eps};
    return LAUNCH(stream, run_ln, a);
}

typedef struct vec_args {
    float *y;
    const float *x;
    size_t n;
    int rows, d;
} vec_args;

static void run_gelu(const void *p) {
    const vec_args *a = p;
    dev(a->y, a->n * 4, "gelu");
    sotto_gelu(a->y, a->n);
}

int sotto_cuda_gelu(float *x, size_t n, sotto_cuda_stream stream, sotto_err *err) {
    if (!n) return SOTTO_OK;
    vec_args a = {x, NULL, n, 0, 0};
    return LAUNCH(stream, run_gelu, a);
}

static void run_softmax(const void *p) {
    const vec_args *a = p;
    dev(a->y, span(a->rows, a->d, a->d), "softmax");
    sotto_softmax_rows(a->y, a->rows, a->d);
}

int sotto_cuda_softmax_rows(float *x, int n, int d, sotto_cuda_stream stream, sotto_err *err) {
    if (n <= 0 || d <= 0) return SOTTO_OK;
    vec_args a = {x, NULL, 0, n, d};
    return LAUNCH(stream, run_softmax, a);
}

static void run_bias(const void *p) {
    const vec_args *a = p;
    dev(a->y, span(a->rows, a->d, a->d), "add_bias_rows x");
    dev(a->x, span(1, a->d, a->d), "add_bias_rows b");
    sotto_add_bias_rows(a->y, a->x, a->rows, a->d);
}

int sotto_cuda_add_bias_rows(float *x, const float *b, int n, int d, sotto_cuda_stream stream, sotto_err *err) {
    if (n <= 0 || d <= 0) return SOTTO_OK;
    vec_args a = {x, b, 0, n, d};
    return LAUNCH(stream, run_bias, a);
}

static void run_add(const void *p) {
    const vec_args *a = p;
    dev(a->y, a->n * 4, "add y");
    dev(a->x, a->n * 4, "add x");
    for (size_t i = 0; i < a->n; i++) a->y[i] += a->x[i];
}

int sotto_cuda_add(float *y, const float *x, size_t n, sotto_cuda_stream stream, sotto_err *err) {
    if (!n) return SOTTO_OK;
    vec_args a = {y, x, n, 0, 0};
    return LAUNCH(stream, run_add, a);
}

typedef struct im2col_args {
    const float *x;
    float *cols;
    int t_in, c_in, stride;
} im2col_args;

static void run_im2col(const void *p) {
    const im2col_args *a = p;
    const int t_out = (a->t_in - 1) / a->stride + 1, kc = a->c_in * 3;
    dev(a->x, span(a->t_in, a->c_in, a->c_in), "im2col x");
    dev(a->cols, span(t_out, kc, kc), "im2col cols");
    for (int t = 0; t < t_out; t++)
        for (int c = 0; c < a->c_in; c++)
            for (int j = 0; j < 3; j++) {
                int ti = t * a->stride - 1 + j;
                a->cols[(size_t)t * kc + c * 3 + j] =
                    ti < 0 || ti >= a->t_in ? 0.f : a->x[(size_t)ti * a->c_in + c];
            }
}

int sotto_cuda_im2col_k3(const float *x, int t_in, int c_in, int stride, float *cols, sotto_cuda_stream stream,
                         sotto_err *err) {
    if (t_in <= 0 || c_in <= 0 || stride <= 0)
        return sotto_err_set(err, SOTTO_E_INVALID, "cuda im2col: t_in %d, c_in %d, stride %d", t_in, c_in, stride);
    im2col_args a = {x, cols, t_in, c_in, stride};
    return LAUNCH(stream, run_im2col, a);
}

typedef struct attn_args {
    const float *q, *k, *v;
    float *out;
    int q_stride, kv_stride, out_stride, nr, n_kv, n_head, dh, q_pos0;
    float scale;
} attn_args;

static void run_attention(const void *p) {
    const attn_args *a = p;
    dev(a->q, span(a->nr, a->q_stride, a->n_head * a->dh), "attention q");
    dev(a->k, span(a->n_kv, a->kv_stride, a->n_head * a->dh), "attention k");
    dev(a->v, span(a->n_kv, a->kv_stride, a->n_head * a->dh), "attention v");
    dev(a->out, span(a->nr, a->out_stride, a->n_head * a->dh), "attention out");
    if (a->q_pos0 >= 0) {
        float *s = malloc(sizeof(float) * sotto_attention_scratch(a->nr, a->n_kv));
        if (!s) abort();
        sotto_attention(a->q, a->q_stride, a->k, a->v, a->kv_stride, a->out, a->out_stride, a->nr, a->n_kv,
                        a->n_head, a->dh, a->scale, 1, a->q_pos0, s);
        free(s);
        return;
    }
    float *s = malloc(sizeof(float) * (size_t)a->nr * a->n_kv);
    if (!s) abort();
    for (int h = 0; h < a->n_head; h++)
        sotto_attention_rows(a->q + h * a->dh, a->q_stride, a->k + h * a->dh, a->v + h * a->dh, a->kv_stride,
                             a->out + h * a->dh, a->out_stride, a->nr, a->n_kv, a->dh, a->scale, s);
    free(s);
}

int sotto_cuda_attention_rows(const float *q, int q_stride, const float *k, const float *v, int kv_stride,
                              float *out, int out_stride, int nr, int n_kv, int n_head, int dh, float scale,
                              sotto_cuda_stream stream, sotto_err *err) {
    if (nr <= 0 || n_head <= 0) return SOTTO_OK;
    if (n_kv <= 0 || dh <= 0 || dh > 256)
        return sotto_err_set(err, SOTTO_E_INVALID, "cuda attention: n_kv %d, dh %d (1..256)", n_kv, dh);
    attn_args a = {q, k, v, out, q_stride, kv_stride, out_stride, nr, n_kv, n_head, dh, -1, scale};
    return LAUNCH(stream, run_attention, a);
}

int sotto_cuda_attention_causal(const float *q, int q_stride, const float *k, const float *v, int kv_stride,
                                float *out, int out_stride, int nr, int n_kv, int n_head, int dh, float scale,
                                int q_pos0, sotto_cuda_stream stream, sotto_err *err) {
    if (q_pos0 < 0 || n_kv < q_pos0 + nr)
        return sotto_err_set(err, SOTTO_E_INVALID, "cuda causal attention: %d keys for rows at %d..%d", n_kv,
                             q_pos0, q_pos0 + nr - 1);
    if (nr <= 0 || n_head <= 0) return SOTTO_OK;
    if (dh <= 0 || dh > 256) return sotto_err_set(err, SOTTO_E_INVALID, "cuda attention: dh %d (1..256)", dh);
    attn_args a = {q, k, v, out, q_stride, kv_stride, out_stride, nr, n_kv, n_head, dh, q_pos0, scale};
    return LAUNCH(stream, run_attention, a);
}

/* ---- decoder steps driven by row metadata ------------------------------ */

typedef struct meta_args {
    const float *q, *k, *v; /* q, or k and v for kv_append */
    float *out;
    const sotto_cuda_row *rows;
    int n, d, n_head, dh, layer, cross, max_kv;
    float scale;
} meta_args;

static void run_kv_append(const void *p) {
    const meta_args *a = p;
    dev(a->rows, sizeof(sotto_cuda_row) * (size_t)a->n, "kv_append rows");
    dev(a->k, (size_t)a->n * a->d * 4, "kv_append k");
    dev(a->v, (size_t)a->n * a->d * 4, "kv_append v");
    for (int i = 0; i < a->n; i++) {
        const sotto_cuda_row *r = &a->rows[i];
        float *kd = r->self_k + (size_t)a->layer * r->self_layer_stride + (size_t)r->pos * a->d;
        float *vd = r->self_v + (size_t)a->layer * r->self_layer_stride + (size_t)r->pos * a->d;
        dev(kd, (size_t)a->d * 4, "kv_append destination k");
        dev(vd, (size_t)a->d * 4, "kv_append destination v");
        memcpy(kd, a->k + (size_t)i * a->d, sizeof(float) * a->d);
        memcpy(vd, a->v + (size_t)i * a->d, sizeof(float) * a->d);
    }
}

int sotto_cuda_kv_append(const float *k, const float *v, int n, int d, const sotto_cuda_row *rows, int layer,
                         sotto_cuda_stream stream, sotto_err *err) {
    if (n <= 0) return SOTTO_OK;
    meta_args a = {NULL, k, v, NULL, rows, n, d, 0, 0, layer, 0, 0, 0.f};
    return LAUNCH(stream, run_kv_append, a);
}

static void run_attention_meta(const void *p) {
    const meta_args *a = p;
    dev(a->rows, sizeof(sotto_cuda_row) * (size_t)a->n, "attention rows");
    float *s = malloc(sizeof(float) * (size_t)a->max_kv);
    if (!s) abort();
    for (int i = 0; i < a->n; i++) {
        const sotto_cuda_row *r = &a->rows[i];
        const float *k, *v;
        int n_kv;
        if (a->cross) {
            k = r->cross_k + (size_t)a->layer * r->cross_layer_stride;
            v = r->cross_v + (size_t)a->layer * r->cross_layer_stride;
            n_kv = a->max_kv;
        } else {
            k = r->self_k + (size_t)a->layer * r->self_layer_stride;
            v = r->self_v + (size_t)a->layer * r->self_layer_stride;
            n_kv = r->pos + 1;
            if (n_kv > a->max_kv) {
                fprintf(stderr, "cuda_emu: row %d attends to %d keys, over max_kv %d\n", i, n_kv, a->max_kv);
                abort();
            }
        }
        dev(k, span(n_kv, a->d, a->d), "attention k (row)");
        dev(v, span(n_kv, a->d, a->d), "attention v (row)");
        dev(a->q + (size_t)i * a->d, (size_t)a->d * 4, "attention q (row)");
        dev(a->out + (size_t)i * a->d, (size_t)a->d * 4, "attention out (row)");
        for (int h = 0; h < a->n_head; h++)
            sotto_attention_rows(a->q + (size_t)i * a->d + h * a->dh, a->d, k + h * a->dh, v + h * a->dh, a->d,
                                 a->out + (size_t)i * a->d + h * a->dh, a->d, 1, n_kv, a->dh, a->scale, s);
    }
    free(s);
}

static int attention_meta(const float *q, float *out, int n, int n_head, int dh, const sotto_cuda_row *rows,
                          int layer, int cross, int max_kv, float scale, sotto_cuda_stream stream, sotto_err *err) {
    if (n <= 0 || n_head <= 0) return SOTTO_OK;
    if (max_kv <= 0 || dh <= 0 || dh > 256)
        return sotto_err_set(err, SOTTO_E_INVALID, "cuda attention: %d keys, dh %d (1..256)", max_kv, dh);
    meta_args a = {q, NULL, NULL, out, rows, n, n_head * dh, n_head, dh, layer, cross, max_kv, scale};
    return LAUNCH(stream, run_attention_meta, a);
}

int sotto_cuda_attention_self(const float *q, float *out, int n, int n_head, int dh, const sotto_cuda_row *rows,
                              int layer, int max_kv, float scale, sotto_cuda_stream stream, sotto_err *err) {
    return attention_meta(q, out, n, n_head, dh, rows, layer, 0, max_kv, scale, stream, err);
}

int sotto_cuda_attention_cross(const float *q, float *out, int n, int n_head, int dh, const sotto_cuda_row *rows,
                               int layer, int n_kv, float scale, float *scratch, sotto_cuda_stream stream,
                               sotto_err *err) {
    /* the GPU writes per-chunk partials there: it must be device memory of the size the header gives */
    if (scratch && n > 0 && n_head > 0)
        dev(scratch, sizeof(float) * sotto_cuda_attention_cross_scratch(n, n_head, dh), "attention_cross scratch");
    return attention_meta(q, out, n, n_head, dh, rows, layer, 1, n_kv, scale, stream, err);
}
