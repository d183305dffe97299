/* backend_cpu.c - the CPU's entry in the backend table (backend.h): the
 * layers read the host weights (encoder.c, decoder.c), the K/V caches are
 * host arrays, copies are memcpy and nothing is ever queued. */
#include "backend.h"

#include <stdlib.h>
#include <string.h>

static int cpu_state_alloc(sotto_state *st, sotto_err *err) {
    const size_t cross = sotto_state_cross_floats(st), self = sotto_state_self_floats(st);
    st->cross_k = sotto_alloc_floats(cross);
    st->cross_v = sotto_alloc_floats(cross);
    st->self_k = sotto_alloc_floats(self);
    st->self_v = sotto_alloc_floats(self);
    if (!st->cross_k || !st->cross_v || !st->self_k || !st->self_v)
        return sotto_err_set(err, SOTTO_E_NOMEM, "out of memory for a decoder state");
    return SOTTO_OK;
}

static void cpu_state_free(sotto_state *st) {
    free(st->cross_k);
    free(st->cross_v);
    free(st->self_k);
    free(st->self_v);
    st->cross_k = st->cross_v = st->self_k = st->self_v = NULL;
}

static size_t cpu_part_bytes(const sotto_model *m, int part) {
    (void)m, (void)part;
    return 0;
}

static void *cpu_buf_alloc(size_t bytes) { return malloc(bytes); }

static int cpu_buf_copy(sotto_state *st, void *dst, const void *src, size_t bytes, sotto_err *err) {
    (void)st, (void)err;
    memcpy(dst, src, bytes);
    return SOTTO_OK;
}

const sotto_backend sotto_backend_cpu = {
    .name = "cpu",
    .model_upload = NULL,
    .model_free = NULL,
    .model_part_bytes = cpu_part_bytes,
    .state_alloc = cpu_state_alloc,
    .state_free = cpu_state_free,
    .state_fetch_encoder_output = NULL,
    .buf_alloc = cpu_buf_alloc,
    .buf_free = free,
    .buf_copy = cpu_buf_copy,
    .sync = NULL,
    .encode_batch = sotto_cpu_encode_batch,
    .decode = sotto_cpu_decode,
    .ws_free = NULL,
};
