/* backend_cpu.c - the CPU's entry in the backend table (backend.h): the
 * layers read the host weights (encoder.c, decoder.c), the K/V caches are
 * host arrays (sotto_cpu_kv in the state's be_state), copies are memcpy and
 * nothing is ever queued. */
#include "backend.h"

#include <stdlib.h>
#include <string.h>

static void cpu_state_free(sotto_state *st) {
    sotto_cpu_kv *kv = sotto_cpu_kv_of(st);
    if (kv) {
        free(kv->cross_k);
        free(kv->cross_v);
        free(kv->self_k);
        free(kv->self_v);
        free(kv->gather_tmp);
    }
    free(kv);
    st->be_state = NULL;
}

static int cpu_state_alloc(sotto_state *st, sotto_err *err) {
    const size_t cross = sotto_state_cross_floats(st), self = sotto_state_self_floats(st);
    sotto_cpu_kv *kv = calloc(1, sizeof *kv);
    st->be_state = kv;
    if (!kv || !(kv->cross_k = sotto_alloc_floats(cross)) || !(kv->cross_v = sotto_alloc_floats(cross)) ||
        !(kv->self_k = sotto_alloc_floats(self)) || !(kv->self_v = sotto_alloc_floats(self)))
        return sotto_err_set(err, SOTTO_E_NOMEM, "out of memory for a decoder state");
    return SOTTO_OK;
}

static size_t cpu_part_bytes(const sotto_model *m, int part) {
    (void)m, (void)part;
    return 0;
}

static int host_copy(void *ctx, float *dst, const float *src, size_t bytes) {
    (void)ctx;
    memcpy(dst, src, bytes);
    return SOTTO_OK;
}

static int cpu_seq_gather(sotto_state *st, const int *dst, const int *src, const int *lens, int n,
                          sotto_err *err) {
    sotto_cpu_kv *kv = sotto_cpu_kv_of(st);
    size_t need = sotto_kv_gather_tmp_floats(st, lens, n);
    if (need > kv->gather_cap) {
        /* at least double: the sequences grow by a row per step */
        size_t cap = need > 2 * kv->gather_cap ? need : 2 * kv->gather_cap;
        free(kv->gather_tmp);
        kv->gather_cap = 0;
        if (!(kv->gather_tmp = sotto_alloc_floats(cap)))
            return sotto_err_set(err, SOTTO_E_NOMEM, "out of memory for a beam gather");
        kv->gather_cap = cap;
    }
    return sotto_kv_gather(st, kv->self_k, kv->self_v, kv->gather_tmp, dst, src, lens, n, host_copy, NULL);
}

const sotto_backend sotto_backend_cpu = {
    .name = "cpu",
    .model_upload = NULL,
    .model_free = NULL,
    .model_part_bytes = cpu_part_bytes,
    .state_alloc = cpu_state_alloc,
    .state_free = cpu_state_free,
    .state_fetch_encoder_output = NULL,
    .seq_gather = cpu_seq_gather,
    .encode_batch = sotto_cpu_encode_batch,
    .decode = sotto_cpu_decode,
    .ws_free = NULL,
};
