/* gpu_none.c - the GPU side of a build without CUDA: the probe says why no
 * GPU can be used, and there is no CUDA backend (model.c never leaves the
 * CPU here). */
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

const sotto_backend *sotto_backend_cuda(void) { return NULL; }
