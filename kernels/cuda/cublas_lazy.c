/* cublas_lazy.c - the cuBLAS entry points of the GPU backend, forwarded to
 * libcublas opened on first use (see cublas_lazy.h). The definitions below
 * take their prototypes from cublas_v2.h, so a mismatch with the toolkit's
 * header is a compile error, not a wrong call. */
#define _GNU_SOURCE
#include "cublas_lazy.h"

#include <cublas_v2.h>
#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STR_(x) #x
#define STR(x) STR_(x)
#define CUBLAS_SONAME "libcublas.so." STR(CUBLAS_VER_MAJOR)

/* every function used, by its exported name; X(name, return, params) */
#define SOTTO_CUBLAS_FUNCS(X)                                                                  \
    X(cublasCreate_v2, (cublasHandle_t * h))                                                   \
    X(cublasDestroy_v2, (cublasHandle_t h))                                                    \
    X(cublasSetStream_v2, (cublasHandle_t h, cudaStream_t s))                                  \
    X(cublasSetMathMode, (cublasHandle_t h, cublasMath_t mode))                                \
    X(cublasSgemm_v2, (cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,    \
                       int n, int k, const float *alpha, const float *A, int lda,              \
                       const float *B, int ldb, const float *beta, float *C, int ldc))         \
    X(cublasSgeam, (cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,       \
                    int n, const float *alpha, const float *A, int lda, const float *beta,     \
                    const float *B, int ldb, float *C, int ldc))                               \
    X(cublasSgemmStridedBatched,                                                               \
      (cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,      \
       const float *alpha, const float *A, int lda, long long int sA, const float *B, int ldb, \
       long long int sB, const float *beta, float *C, int ldc, long long int sC, int batch))   \
    X(cublasGemmEx, (cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,      \
                     int n, int k, const void *alpha, const void *A, cudaDataType At, int lda, \
                     const void *B, cudaDataType Bt, int ldb, const void *beta, void *C,       \
                     cudaDataType Ct, int ldc, cublasComputeType_t ct, cublasGemmAlgo_t algo)) \
    X(cublasGemmStridedBatchedEx,                                                              \
      (cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,      \
       const void *alpha, const void *A, cudaDataType At, int lda, long long int sA,           \
       const void *B, cudaDataType Bt, int ldb, long long int sB, const void *beta, void *C,   \
       cudaDataType Ct, int ldc, long long int sC, int batch, cublasComputeType_t ct,          \
       cublasGemmAlgo_t algo))

#define FIELD(name, params) cublasStatus_t(*name) params;
static struct {
    SOTTO_CUBLAS_FUNCS(FIELD)
} fn;
#undef FIELD

static pthread_once_t once = PTHREAD_ONCE_INIT;
static int ready;
static char load_why[512];
static char load_path[512];

static void *open_lib(void) {
    const char *pin = getenv("SOTTO_CUBLAS");
    if (pin && pin[0]) {
        void *h = dlopen(pin, RTLD_NOW | RTLD_LOCAL);
        if (!h) snprintf(load_why, sizeof load_why, "cannot load cuBLAS from SOTTO_CUBLAS=%s: %s", pin, dlerror());
        return h;
    }
    const char *tried[] = {CUBLAS_SONAME,
#ifdef SOTTO_CUBLAS_DIR
                           SOTTO_CUBLAS_DIR "/" CUBLAS_SONAME,
#endif
                           NULL};
    char first[256] = "";
    for (int i = 0; tried[i]; i++) {
        void *h = dlopen(tried[i], RTLD_NOW | RTLD_LOCAL);
        if (h) return h;
        if (!first[0]) snprintf(first, sizeof first, "%s", dlerror());
    }
    snprintf(load_why, sizeof load_why, "cannot load cuBLAS (%s; also looked in %s): %s", CUBLAS_SONAME,
#ifdef SOTTO_CUBLAS_DIR
             SOTTO_CUBLAS_DIR,
#else
             "no build-time folder",
#endif
             first);
    return NULL;
}

static void load(void) {
    void *h = open_lib();
    if (!h) return;
    void *p;
#define RESOLVE(name, params)                                                                   \
    if (!(p = dlsym(h, #name))) {                                                               \
        snprintf(load_why, sizeof load_why, "cuBLAS lacks %s: %s", #name, dlerror());           \
        dlclose(h);                                                                             \
        memset(&fn, 0, sizeof fn);                                                              \
        return;                                                                                 \
    }                                                                                           \
    memcpy(&fn.name, &p, sizeof p);
    SOTTO_CUBLAS_FUNCS(RESOLVE)
#undef RESOLVE
    struct link_map *lm = NULL;
    if (dlinfo(h, RTLD_DI_LINKMAP, &lm) == 0 && lm && lm->l_name)
        snprintf(load_path, sizeof load_path, "%s", lm->l_name);
    ready = 1; /* the library stays open for the life of the process */
}

int sotto_cublas_load(char *why, size_t why_sz) {
    pthread_once(&once, load);
    if (!ready && why && why_sz) snprintf(why, why_sz, "%s", load_why);
    return ready;
}

const char *sotto_cublas_path(void) {
    pthread_once(&once, load);
    return ready ? load_path : "";
}

/* The forwarders. The argument lists repeat the parameter names above. */
#define NOT_LOADED                                                                              \
    if (!sotto_cublas_load(NULL, 0)) return CUBLAS_STATUS_NOT_INITIALIZED

cublasStatus_t CUBLASWINAPI cublasCreate_v2(cublasHandle_t *h) {
    NOT_LOADED;
    return fn.cublasCreate_v2(h);
}

cublasStatus_t CUBLASWINAPI cublasDestroy_v2(cublasHandle_t h) {
    NOT_LOADED;
    return fn.cublasDestroy_v2(h);
}

cublasStatus_t CUBLASWINAPI cublasSetStream_v2(cublasHandle_t h, cudaStream_t s) {
    NOT_LOADED;
    return fn.cublasSetStream_v2(h, s);
}

cublasStatus_t CUBLASWINAPI cublasSetMathMode(cublasHandle_t h, cublasMath_t mode) {
    NOT_LOADED;
    return fn.cublasSetMathMode(h, mode);
}

cublasStatus_t CUBLASWINAPI cublasSgemm_v2(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb,
                                           int m, int n, int k, const float *alpha, const float *A,
                                           int lda, const float *B, int ldb, const float *beta,
                                           float *C, int ldc) {
    NOT_LOADED;
    return fn.cublasSgemm_v2(h, ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
}

cublasStatus_t CUBLASWINAPI cublasSgeam(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb,
                                        int m, int n, const float *alpha, const float *A, int lda,
                                        const float *beta, const float *B, int ldb, float *C,
                                        int ldc) {
    NOT_LOADED;
    return fn.cublasSgeam(h, ta, tb, m, n, alpha, A, lda, beta, B, ldb, C, ldc);
}

cublasStatus_t CUBLASWINAPI cublasSgemmStridedBatched(cublasHandle_t h, cublasOperation_t ta,
                                                      cublasOperation_t tb, int m, int n, int k,
                                                      const float *alpha, const float *A, int lda,
                                                      long long int sA, const float *B, int ldb,
                                                      long long int sB, const float *beta, float *C,
                                                      int ldc, long long int sC, int batch) {
    NOT_LOADED;
    return fn.cublasSgemmStridedBatched(h, ta, tb, m, n, k, alpha, A, lda, sA, B, ldb, sB, beta, C,
                                        ldc, sC, batch);
}

cublasStatus_t CUBLASWINAPI cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb,
                                         int m, int n, int k, const void *alpha, const void *A,
                                         cudaDataType At, int lda, const void *B, cudaDataType Bt,
                                         int ldb, const void *beta, void *C, cudaDataType Ct, int ldc,
                                         cublasComputeType_t ct, cublasGemmAlgo_t algo) {
    NOT_LOADED;
    return fn.cublasGemmEx(h, ta, tb, m, n, k, alpha, A, At, lda, B, Bt, ldb, beta, C, Ct, ldc, ct,
                           algo);
}

cublasStatus_t CUBLASWINAPI cublasGemmStridedBatchedEx(
    cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
    const void *alpha, const void *A, cudaDataType At, int lda, long long int sA, const void *B,
    cudaDataType Bt, int ldb, long long int sB, const void *beta, void *C, cudaDataType Ct, int ldc,
    long long int sC, int batch, cublasComputeType_t ct, cublasGemmAlgo_t algo) {
    NOT_LOADED;
    return fn.cublasGemmStridedBatchedEx(h, ta, tb, m, n, k, alpha, A, At, lda, sA, B, Bt, ldb, sB,
                                         beta, C, Ct, ldc, sC, batch, ct, algo);
}
