/* test_cublas_lazy.c - cuBLAS is opened on first GPU use, not at start-up
 * (kernels/cuda/cublas_lazy.h). Built in CUDA builds only; needs no GPU.
 *
 *   test_cublas_lazy          the library is not mapped until loaded; the
 *                             load finds it and resolves every entry point;
 *                             a forwarded call reaches cuBLAS
 *   test_cublas_lazy --pinned SOTTO_CUBLAS names a missing file: the load
 *                             fails with that path in the message, and the
 *                             forwarded calls return NOT_INITIALIZED
 *   (scripts/test.sh runs both; the second under SOTTO_CUBLAS=/nonexistent)
 */
#include "cublas_lazy.h"

#include <cublas_v2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures;
#define CHECK(c, ...)                                                                              \
    do {                                                                                           \
        if (!(c)) {                                                                                \
            failures++;                                                                            \
            printf("FAIL %s:%d: ", __FILE__, __LINE__);                                            \
            printf(__VA_ARGS__);                                                                   \
            printf("\n");                                                                          \
        }                                                                                          \
    } while (0)

static int mapped(const char *needle) {
    FILE *f = fopen("/proc/self/maps", "r");
    if (!f) return -1;
    char line[4096];
    int found = 0;
    while (fgets(line, sizeof line, f))
        if (strstr(line, needle)) found = 1;
    fclose(f);
    return found;
}

int main(int argc, char **argv) {
    int pinned = argc > 1 && !strcmp(argv[1], "--pinned");
    CHECK(mapped("libcublas") == 0, "libcublas is mapped before anything asked for it");
    char why[512] = "";
    int ok = sotto_cublas_load(why, sizeof why);
    if (pinned) {
        const char *pin = getenv("SOTTO_CUBLAS");
        CHECK(pin && pin[0], "--pinned needs SOTTO_CUBLAS set");
        CHECK(!ok, "loaded from SOTTO_CUBLAS=%s", pin ? pin : "");
        CHECK(pin && strstr(why, pin), "the message does not name the pinned path: %s", why);
        CHECK(mapped("libcublas") == 0, "libcublas mapped although the pinned load failed");
        cublasHandle_t h = NULL;
        CHECK(cublasCreate(&h) == CUBLAS_STATUS_NOT_INITIALIZED, "cublasCreate without cuBLAS");
        float a = 1, *null = NULL;
        CHECK(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 1, 1, 1, &a, null, 1, null, 1, &a, null, 1) ==
                  CUBLAS_STATUS_NOT_INITIALIZED,
              "cublasSgemm without cuBLAS");
        printf("pinned to a missing file: %s\n", why);
    } else {
        CHECK(ok, "cuBLAS did not load: %s", why);
        CHECK(mapped("libcublas.so") == 1, "libcublas is not mapped after the load");
        CHECK(sotto_cublas_path()[0] != 0, "no path after a successful load");
        CHECK(sotto_cublas_load(NULL, 0) == ok, "a second load gave another answer");
        /* reaches the library: with a GPU a handle, without one its own error */
        cublasHandle_t h = NULL;
        cublasStatus_t s = cublasCreate(&h);
        if (s == CUBLAS_STATUS_SUCCESS) {
            CHECK(cublasSetMathMode(h, CUBLAS_PEDANTIC_MATH) == CUBLAS_STATUS_SUCCESS, "setMathMode");
            CHECK(cublasDestroy(h) == CUBLAS_STATUS_SUCCESS, "destroy");
        }
        printf("cuBLAS loaded from %s; cublasCreate: status %d (%s)\n", sotto_cublas_path(), (int)s,
               s == CUBLAS_STATUS_SUCCESS ? "a GPU is here" : "no usable GPU here");
    }
    printf("%s\n", failures ? "FAILED" : "all checks passed");
    return failures ? 1 : 0;
}
