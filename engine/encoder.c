/* encoder.c - Whisper's audio encoder and the decoder's cross-attention K/V,
 * computed once per 30 s window, or over its first n_ctx positions only
 * (sotto_encode_batch_ctx: work that follows the audio). The checks here, the
 * work on the model's backend (backend.h); the CPU's is below.
 *
 *   x = GELU(conv2(GELU(conv1(mel)))) + pos            [T = 1500][d]
 *   per layer: x += o(attn(LN(x)));  x += fc2(GELU(fc1(LN(x))))
 *   enc_out = LN(x)
 */
#include "backend.h"
#include "ops.h"
#include "state.h"

#include <math.h>
#include <string.h>

/* The first activation row of window b: the positions of the windows before it. */
static size_t win_offset(const int *n_ctx, int T, int b) {
    size_t o = 0;
    for (int i = 0; i < b; i++) o += (size_t)(n_ctx ? n_ctx[i] : T);
    return o;
}

static int oom(sotto_err *err) {
    return sotto_err_set(err, SOTTO_E_NOMEM, "out of memory in the encoder");
}

int sotto_encode_batch_ctx(const sotto_model *m, sotto_workspace *ws, sotto_state *const *sts,
                           const float *const *mels, const int *n_ctx, int B, sotto_err *err) {
    const int T = m->hp.n_audio_ctx;
    if (B < 1) return sotto_err_set(err, SOTTO_E_INVALID, "encoder batch of %d windows", B);
    for (int b = 0; b < B; b++) {
        if (sts[b]->m != m) return sotto_err_set(err, SOTTO_E_INVALID, "state belongs to another model");
        for (int c = 0; c < b; c++)
            if (sts[c] == sts[b]) return sotto_err_set(err, SOTTO_E_INVALID, "a state appears twice in a batch");
        if (n_ctx && (n_ctx[b] < 1 || n_ctx[b] > T))
            return sotto_err_set(err, SOTTO_E_INVALID, "window %d: %d encoder positions, not 1..%d", b,
                                 n_ctx[b], T);
    }
    return m->be->encode_batch(m, ws, sts, mels, n_ctx, B, err);
}

int sotto_cpu_encode_batch(const sotto_model *m, sotto_workspace *ws, sotto_state *const *sts,
                           const float *const *mels, const int *n_ctx, int B, sotto_err *err) {
    const sotto_hparams *hp = &m->hp;
    const int T = hp->n_audio_ctx, T2 = 2 * T, d = hp->n_audio_state, nm = hp->n_mels;
    const int H = hp->n_audio_head, dh = d / H, ff = hp->n_audio_ff;
    /* window b's rows of the activations start at row OFF(b) */
#define OFF(b) win_offset(n_ctx, T, (b))
    const size_t BT = OFF(B);

    /* per window: mel [nm][T2] -> time-major [T2][nm] (WS_H), conv1 -> [T2][d]
       (WS_FF), conv2 -> its rows of x; then all B*T rows go through the layers
       together (h in WS_H, the MLP in WS_FF) */
    size_t nh = (size_t)T2 * (nm > d ? nm : d), nf = (size_t)T2 * (ff > d ? ff : d);
    if (nh < BT * d) nh = BT * d;
    if (nf < BT * ff) nf = BT * ff;
    float *xt = sotto_ws_get(ws, WS_H, nh);
    float *c1 = sotto_ws_get(ws, WS_FF, nf);
    float *cols = sotto_ws_get(ws, WS_COLS, (size_t)T2 * (nm > d ? nm : d) * 3);
    float *x = sotto_ws_get(ws, WS_X, BT * d);
    float *q = sotto_ws_get(ws, WS_Q, BT * d);
    float *k = sotto_ws_get(ws, WS_K, BT * d);
    float *v = sotto_ws_get(ws, WS_V, BT * d);
    float *att = sotto_ws_get(ws, WS_ATT, BT * d);
    float *scratch = sotto_ws_get(ws, WS_SCRATCH, sotto_attention_scratch(T, T));
    if (!xt || !c1 || !cols || !x || !q || !k || !v || !att || !scratch) return oom(err);

    for (int b = 0; b < B; b++) {
        const float *mel = mels[b];
        const int Tb = (int)(OFF(b + 1) - OFF(b)), Tb2 = 2 * Tb;
        float *xb = x + OFF(b) * d;
        /* the first Tb2 frames of the window: the convolutions see zeros past
           them, as whisper.cpp's audio_ctx does */
        for (int t = 0; t < Tb2; t++)
            for (int c = 0; c < nm; c++) xt[(size_t)t * nm + c] = mel[(size_t)c * T2 + t];
        sotto_conv1d_k3(xt, Tb2, nm, m->conv1_w, m->conv1_b, d, 1, c1, cols);
        sotto_gelu(c1, (size_t)Tb2 * d);
        sotto_conv1d_k3(c1, Tb2, d, m->conv2_w, m->conv2_b, d, 2, xb, cols);
        sotto_gelu(xb, (size_t)Tb * d);
        for (size_t i = 0; i < (size_t)Tb * d; i++) xb[i] += m->enc_pos[i];
    }

    float *h = xt; /* reuse: [B*T][d] fits in WS_H */
    float *f = c1; /* [B*T][ff] fits in WS_FF */
    const float scale = 1.0f / sqrtf((float)dh);
    for (int l = 0; l < hp->n_audio_layer; l++) {
        const sotto_enc_layer *L = &m->enc[l];
        sotto_layer_norm(x, h, (int)BT, d, L->attn_ln.g, L->attn_ln.b, 1e-5f);
        sotto_linear(&L->q.w, L->q.b, h, (int)BT, q);
        sotto_linear(&L->k.w, L->k.b, h, (int)BT, k);
        sotto_linear(&L->v.w, L->v.b, h, (int)BT, v);
        for (int b = 0; b < B; b++) { /* attention stays within each window */
            size_t o = OFF(b) * d;
            int Tb = (int)(OFF(b + 1) - OFF(b));
            sotto_attention(q + o, d, k + o, v + o, d, att + o, d, Tb, Tb, H, dh, scale, 0, 0, scratch);
        }
        sotto_linear_acc(&L->o.w, L->o.b, att, (int)BT, x);
        sotto_layer_norm(x, h, (int)BT, d, L->mlp_ln.g, L->mlp_ln.b, 1e-5f);
        sotto_linear(&L->fc1.w, L->fc1.b, h, (int)BT, f);
        sotto_gelu(f, BT * ff);
        sotto_linear_acc(&L->fc2.w, L->fc2.b, f, (int)BT, x);
    }

    const int dt = hp->n_text_state;
    const size_t per_layer = (size_t)T * dt;
    for (int b = 0; b < B; b++) {
        sotto_state *st = sts[b];
        sotto_cpu_kv *kv = sotto_cpu_kv_of(st);
        const int Tb = (int)(OFF(b + 1) - OFF(b));
        sotto_layer_norm(x + OFF(b) * d, st->enc_out, Tb, d, m->enc_ln.g, m->enc_ln.b, 1e-5f);
        /* cross-attention K/V of every decoder layer: V's first Tb rows; K
           transposed (state.h), its first Tb columns, through q (free now) */
        for (int l = 0; l < hp->n_text_layer; l++) {
            const sotto_dec_layer *L = &m->dec[l];
            float *kt = kv->cross_k + l * per_layer;
            sotto_linear(&L->ck.w, L->ck.b, st->enc_out, Tb, q);
#pragma omp parallel for schedule(static) if ((size_t)Tb * dt >= 65536)
            for (int c = 0; c < dt; c++)
                for (int t = 0; t < Tb; t++) kt[(size_t)c * T + t] = q[(size_t)t * dt + c];
            sotto_linear(&L->cv.w, L->cv.b, st->enc_out, Tb, kv->cross_v + l * per_layer);
        }
        st->n_ctx = Tb;
        st->encoded = 1;
        memset(st->seq_len, 0, sizeof(int) * (size_t)st->max_seqs);
    }
#undef OFF
    return SOTTO_OK;
}

int sotto_encode_batch(const sotto_model *m, sotto_workspace *ws, sotto_state *const *sts,
                       const float *const *mels, int B, sotto_err *err) {
    return sotto_encode_batch_ctx(m, ws, sts, mels, NULL, B, err);
}

int sotto_encode(const sotto_model *m, sotto_workspace *ws, sotto_state *st, const float *mel,
                 sotto_err *err) {
    return sotto_encode_batch_ctx(m, ws, &st, &mel, NULL, 1, err);
}

int sotto_encoder_positions(const sotto_model *m, size_t n_samples, size_t pad_samples) {
    const int T = m->hp.n_audio_ctx;
    const size_t per_second = (size_t)T / 30; /* 50 positions of 20 ms */
    size_t secs = (n_samples + pad_samples + SOTTO_SAMPLE_RATE - 1) / SOTTO_SAMPLE_RATE;
    size_t p = (secs ? secs : 1) * per_second;
    return p >= (size_t)T ? T : (int)p;
}
