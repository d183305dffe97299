/* vad_neural.c - Silero probabilities -> per-chunk decisions for sotto_vad
 * (see vad_neural.h; the endpointer is in vad.c). */
#include "vad_neural.h"

#include <stdlib.h>

struct sotto_vad_neural {
    sotto_silero *net;
    float thr, neg;
    int prev;
    float prob[SOTTO_VAD_NEURAL_HIST];
};

sotto_vad_neural *sotto_vad_neural_create(const sotto_vad_params *p, sotto_err *err) {
    sotto_vad_neural *n = calloc(1, sizeof *n);
    if (!n) {
        sotto_err_set(err, SOTTO_E_NOMEM, "vad: out of memory (%zu bytes)", sizeof *n);
        return NULL;
    }
    n->net = sotto_silero_create(p->silero, err);
    if (!n->net) {
        free(n);
        return NULL;
    }
    n->thr = p->speech_threshold;
    n->neg = p->neg_threshold;
    return n;
}

void sotto_vad_neural_free(sotto_vad_neural *n) {
    if (!n) return;
    sotto_silero_free(n->net);
    free(n);
}

int sotto_vad_neural_frame(sotto_vad_neural *n, const float chunk[SOTTO_SILERO_CHUNK],
                           uint64_t frame, int in_speech) {
    float pr = sotto_silero_process(n->net, chunk);
    n->prob[frame % SOTTO_VAD_NEURAL_HIST] = pr;
    int dec = pr >= ((n->prev || in_speech) ? n->neg : n->thr);
    n->prev = dec;
    return dec;
}

float sotto_vad_neural_prob(const sotto_vad_neural *n, uint64_t frame, uint64_t n_frames) {
    if (!n || frame >= n_frames || n_frames - frame > SOTTO_VAD_NEURAL_HIST) return -1.0f;
    return n->prob[frame % SOTTO_VAD_NEURAL_HIST];
}
