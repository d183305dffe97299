/* gpu_none.c - the GPU backend of a build without CUDA: nothing is usable,
 * and every entry point says so (model.c never creates a GPU model here,
 * so the others are only reached through a bug). */
#include "gpu.h"

#include <stdio.h>

#define NO_CUDA "this build of sotto has no CUDA backend (nvcc was not found when it was built)"

int sotto_gpu_probe(char *desc, size_t desc_sz, char *why, size_t why_sz) {
    if (desc_sz) desc[0] = 0;
    snprintf(why, why_sz, "%s", NO_CUDA);
    return 0;
}

int sotto_gpu_mem_info(size_t *used, size_t *total, sotto_err *err) {
    *used = *total = 0;
    return sotto_err_set(err, SOTTO_E_UNSUPPORTED, "%s", NO_CUDA);
}

sotto_gpu_model *sotto_gpu_model_create(const sotto_model *m, sotto_err *err) {
    sotto_err_set(err, SOTTO_E_UNSUPPORTED, "%s", NO_CUDA);
    return NULL;
}

void sotto_gpu_model_free(sotto_gpu_model *g) { (void)g; }
size_t sotto_gpu_model_part_bytes(const sotto_gpu_model *g, int part) { return 0; }

int sotto_gpu_state_alloc(sotto_state *st, sotto_err *err) {
    return sotto_err_set(err, SOTTO_E_UNSUPPORTED, "%s", NO_CUDA);
}

void sotto_gpu_state_release(sotto_state *st) { (void)st; }

int sotto_gpu_state_fetch_encoder_output(sotto_state *st, sotto_err *err) {
    return sotto_err_set(err, SOTTO_E_UNSUPPORTED, "%s", NO_CUDA);
}

void *sotto_gpu_alloc(size_t bytes, sotto_err *err) {
    sotto_err_set(err, SOTTO_E_UNSUPPORTED, "%s", NO_CUDA);
    return NULL;
}

void sotto_gpu_release(void *p) { (void)p; }

int sotto_gpu_copy(void *dst, const void *src, size_t bytes, sotto_err *err) {
    return sotto_err_set(err, SOTTO_E_UNSUPPORTED, "%s", NO_CUDA);
}

int sotto_gpu_sync(sotto_err *err) { return sotto_err_set(err, SOTTO_E_UNSUPPORTED, "%s", NO_CUDA); }

void sotto_gpu_ws_free(void *gws) { (void)gws; }

int sotto_gpu_encode_batch(const sotto_model *m, sotto_workspace *ws, sotto_state *const *sts,
                           const float *const *mels, int B, sotto_err *err) {
    return sotto_err_set(err, SOTTO_E_UNSUPPORTED, "%s", NO_CUDA);
}

int sotto_gpu_decode(const sotto_model *m, sotto_workspace *ws, const sotto_row_ref *rows, int n,
                     int prompt, const float *x_host, const int *want, int n_want, float *logits,
                     sotto_err *err) {
    return sotto_err_set(err, SOTTO_E_UNSUPPORTED, "%s", NO_CUDA);
}
