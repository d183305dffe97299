/* encoder.c - Whisper's audio encoder on the CPU and the decoder's
 * cross-attention K/V, computed once per 30 s window.
 *
 *   x = GELU(conv2(GELU(conv1(mel)))) + pos            [T = 1500][d]
 *   per layer: x += o(attn(LN(x)));  x += fc2(GELU(fc1(LN(x))))
 *   enc_out = LN(x)
 */
#include "gpu.h"
#include "ops.h"
#include "state.h"

#include <math.h>
#include <string.h>

static int oom(sotto_err *err) {
    return sotto_err_set(err, SOTTO_E_NOMEM, "out of memory in the encoder");
}

int sotto_encode_batch(const sotto_model *m, sotto_workspace *ws, sotto_state *const *sts,
                       const float *const *mels, int B, sotto_err *err) {
    const sotto_hparams *hp = &m->hp;
    const int T = hp->n_audio_ctx, T2 = 2 * T, d = hp->n_audio_state, nm = hp->n_mels;
    const int H = hp->n_audio_head, dh = d / H, ff = hp->n_audio_ff;
    if (B < 1) return sotto_err_set(err, SOTTO_E_INVALID, "encoder batch of %d windows", B);
    for (int b = 0; b < B; b++) {
        if (sts[b]->m != m) return sotto_err_set(err, SOTTO_E_INVALID, "state belongs to another model");
        for (int c = 0; c < b; c++)
            if (sts[c] == sts[b]) return sotto_err_set(err, SOTTO_E_INVALID, "a state appears twice in a batch");
    }
    if (m->gpu) return sotto_gpu_encode_batch(m, ws, sts, mels, B, err);
    const size_t BT = (size_t)B * T;

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
        float *xb = x + (size_t)b * T * d;
        for (int t = 0; t < T2; t++)
            for (int c = 0; c < nm; c++) xt[(size_t)t * nm + c] = mel[(size_t)c * T2 + t];
        sotto_conv1d_k3(xt, T2, nm, m->conv1_w, m->conv1_b, d, 1, c1, cols);
        sotto_gelu(c1, (size_t)T2 * d);
        sotto_conv1d_k3(c1, T2, d, m->conv2_w, m->conv2_b, d, 2, xb, cols);
        sotto_gelu(xb, (size_t)T * d);
        for (size_t i = 0; i < (size_t)T * d; i++) xb[i] += m->enc_pos[i];
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
            size_t o = (size_t)b * T * d;
            sotto_attention(q + o, d, k + o, v + o, d, att + o, d, T, T, H, dh, scale, 0, 0, scratch);
        }
        sotto_linear_acc(&L->o.w, L->o.b, att, (int)BT, x);
        sotto_layer_norm(x, h, (int)BT, d, L->mlp_ln.g, L->mlp_ln.b, 1e-5f);
        sotto_linear(&L->fc1.w, L->fc1.b, h, (int)BT, f);
        sotto_gelu(f, BT * ff);
        sotto_linear_acc(&L->fc2.w, L->fc2.b, f, (int)BT, x);
    }

    const size_t per_layer = (size_t)T * hp->n_text_state;
    for (int b = 0; b < B; b++) {
        sotto_state *st = sts[b];
        sotto_layer_norm(x + (size_t)b * T * d, st->enc_out, T, d, m->enc_ln.g, m->enc_ln.b, 1e-5f);
        /* cross-attention K/V of every decoder layer */
        for (int l = 0; l < hp->n_text_layer; l++) {
            const sotto_dec_layer *L = &m->dec[l];
            sotto_linear(&L->ck.w, L->ck.b, st->enc_out, T, st->cross_k + l * per_layer);
            sotto_linear(&L->cv.w, L->cv.b, st->enc_out, T, st->cross_v + l * per_layer);
        }
        st->encoded = 1;
        memset(st->seq_len, 0, sizeof(int) * (size_t)st->max_seqs);
    }
    return SOTTO_OK;
}

int sotto_encode(const sotto_model *m, sotto_workspace *ws, sotto_state *st, const float *mel,
                 sotto_err *err) {
    return sotto_encode_batch(m, ws, &st, &mel, 1, err);
}
