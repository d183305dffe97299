/* cublas_lazy.h - cuBLAS, loaded when the GPU backend first needs it.
 *
 * The CUDA build does not link libcublas: cublas_lazy.c defines the few
 * cuBLAS entry points the backend calls (cublasCreate_v2, cublasGemmEx, ...)
 * and forwards them to the library opened with dlopen() on first use. A
 * process that never touches a GPU (every CPU session, the CLI's tokens and
 * --help, the tests' many short runs) then never maps cuBLAS and cuBLASLt:
 * about 80 ms of start-up and 150 MB of resident memory less per process
 * (docs/PERF.md, 2026-12-05: "cuBLAS on demand").
 *
 * Search order: the dynamic loader's own (LD_LIBRARY_PATH, the cache), then
 * the toolkit's library folder found at build time (SOTTO_CUBLAS_DIR). The
 * environment variable SOTTO_CUBLAS (a file path) pins one library instead.
 * Until the library is loaded, every forwarded call returns
 * CUBLAS_STATUS_NOT_INITIALIZED.
 */
#ifndef SOTTO_CUBLAS_LAZY_H
#define SOTTO_CUBLAS_LAZY_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Loads cuBLAS once (thread-safe; later calls return the first outcome).
 * 1 when it is ready; else 0 and why (the dlopen or dlsym error) in why. */
int sotto_cublas_load(char *why, size_t why_sz);

/* The path it was loaded from ("" before a successful load). */
const char *sotto_cublas_path(void);

#ifdef __cplusplus
}
#endif

#endif
