/* decoder.c - Whisper's text decoder on the CPU: prompt processing for one
 * sequence and batched single-token steps across sequences and streams.
 *
 *   x = emb[token] + pos[position]
 *   per layer: x += o(self_attn(LN(x)))     (K/V appended to the cache)
 *              x += co(cross_attn(LN(x)))   (K/V from sotto_encode)
 *              x += fc2(GELU(fc1(LN(x))))
 *   logits = LN(x) emb^T
 */
#include "backend.h"
#include "ops.h"
#include "state.h"

#include <math.h>
#include <omp.h>
#include <string.h>

typedef sotto_row_ref row_ref;

/* Floats of workspace needed to hold n row_refs. */
static size_t row_ref_floats(int n) {
    return ((size_t)n * sizeof(row_ref) + sizeof(float) - 1) / sizeof(float);
}

/* Runs the decoder layers on n rows x[n][d] whose tokens sit at the
 * positions in rows[]. For prompt processing (prompt != 0) all rows belong
 * to one sequence with consecutive positions and attend causally to each
 * other; otherwise every row is its own sequence's next token. */
static int run_layers(const sotto_model *m, sotto_workspace *ws, const row_ref *rows, int n,
                      int prompt, float *x, sotto_err *err) {
    const sotto_hparams *hp = &m->hp;
    const int d = hp->n_text_state, H = hp->n_text_head, dh = d / H, ff = hp->n_text_ff;
    const int T = hp->n_audio_ctx, C = hp->n_text_ctx;
    const float scale = 1.0f / sqrtf((float)dh);
    float *h = sotto_ws_get(ws, WS_H, (size_t)n * d);
    float *q = sotto_ws_get(ws, WS_Q, (size_t)n * d);
    float *k = sotto_ws_get(ws, WS_K, (size_t)n * d);
    float *v = sotto_ws_get(ws, WS_V, (size_t)n * d);
    float *att = sotto_ws_get(ws, WS_ATT, (size_t)n * d);
    float *f = sotto_ws_get(ws, WS_FF, (size_t)n * ff);
    int nt = omp_get_max_threads();
    size_t sc = sotto_attention_scratch(n, T > C ? T : C);
    if (sc < (size_t)nt * n * (T > C ? T : C)) sc = (size_t)nt * n * (T > C ? T : C);
    float *scratch = sotto_ws_get(ws, WS_SCRATCH, sc);
    int *order = (int *)sotto_ws_get(ws, WS_ORDER, (size_t)2 * n + 1);
    if (!h || !q || !k || !v || !att || !f || !scratch || !order)
        return sotto_err_set(err, SOTTO_E_NOMEM, "out of memory in the decoder");
    /* Step mode: group the rows by state (beams of one stream share its
     * cross-attention K/V), keeping their order within a group. */
    int *group_start = order + n, n_groups = 0;
    if (!prompt) {
        int placed = 0;
        for (int i = 0; i < n; i++) {
            int first = 1;
            for (int j = 0; j < i; j++) first &= rows[j].st != rows[i].st;
            if (!first) continue;
            group_start[n_groups++] = placed;
            for (int j = i; j < n; j++)
                if (rows[j].st == rows[i].st) order[placed++] = j;
        }
        group_start[n_groups] = placed;
    }
    const size_t per_thread = (size_t)n * (T > C ? T : C);
    const int par = n >= 4; /* self-attention over short caches: parallel for several rows */

    for (int l = 0; l < hp->n_text_layer; l++) {
        const sotto_dec_layer *L = &m->dec[l];
        /* self-attention */
        sotto_layer_norm(x, h, n, d, L->attn_ln.g, L->attn_ln.b, 1e-5f);
        sotto_linear(&L->q.w, L->q.b, h, n, q);
        sotto_linear(&L->k.w, L->k.b, h, n, k);
        sotto_linear(&L->v.w, L->v.b, h, n, v);
        for (int i = 0; i < n; i++) {
            const row_ref *r = &rows[i];
            const sotto_cpu_kv *kv = sotto_cpu_kv_of(r->st);
            float *Kc = sotto_state_self(r->st, kv->self_k, l, r->seq);
            float *Vc = sotto_state_self(r->st, kv->self_v, l, r->seq);
            memcpy(Kc + (size_t)r->pos * d, k + (size_t)i * d, sizeof(float) * d);
            memcpy(Vc + (size_t)r->pos * d, v + (size_t)i * d, sizeof(float) * d);
        }
        if (prompt) {
            const row_ref *r = &rows[0];
            const sotto_cpu_kv *kv = sotto_cpu_kv_of(r->st);
            sotto_attention(q, d, sotto_state_self(r->st, kv->self_k, l, r->seq),
                            sotto_state_self(r->st, kv->self_v, l, r->seq), d, att, d, n,
                            r->pos + n, H, dh, scale, 1, r->pos, scratch);
        } else {
#pragma omp parallel for schedule(static) if (par)
            for (int it = 0; it < n * H; it++) {
                const row_ref *r = &rows[it / H];
                const sotto_cpu_kv *kv = sotto_cpu_kv_of(r->st);
                int i = it / H, hd = (it % H) * dh;
                float *s = scratch + (size_t)omp_get_thread_num() * per_thread;
                sotto_attention_rows(q + (size_t)i * d + hd, d,
                                     sotto_state_self(r->st, kv->self_k, l, r->seq) + hd,
                                     sotto_state_self(r->st, kv->self_v, l, r->seq) + hd, d,
                                     att + (size_t)i * d + hd, d, 1, r->pos + 1, dh, scale, s);
            }
        }
        sotto_linear_acc(&L->o.w, L->o.b, att, n, x);

        /* cross-attention */
        sotto_layer_norm(x, h, n, d, L->cross_ln.g, L->cross_ln.b, 1e-5f);
        sotto_linear(&L->cq.w, L->cq.b, h, n, q);
        const size_t per_layer = (size_t)T * d;
        if (prompt) {
            const sotto_state *st = rows[0].st;
            const sotto_cpu_kv *kv = sotto_cpu_kv_of(st);
            sotto_attention_kt(q, d, kv->cross_k + l * per_layer, T, kv->cross_v + l * per_layer, d,
                               att, d, n, st->n_ctx, H, dh, scale, scratch);
        } else {
            float *qg = k, *ag = v; /* free after the self-attention */
            for (int i = 0; i < n; i++)
                memcpy(qg + (size_t)i * d, q + (size_t)order[i] * d, sizeof(float) * d);
#pragma omp parallel for schedule(static) if (n_groups * H > 1)
            for (int it = 0; it < n_groups * H; it++) {
                int g = it / H, hd = (it % H) * dh;
                int g0 = group_start[g], gn = group_start[g + 1] - g0;
                const sotto_state *st = rows[order[g0]].st;
                const sotto_cpu_kv *kv = sotto_cpu_kv_of(st);
                float *s = scratch + (size_t)omp_get_thread_num() * per_thread;
                sotto_attention_rows_kt(qg + (size_t)g0 * d + hd, d, kv->cross_k + l * per_layer + (size_t)hd * T, T,
                                        kv->cross_v + l * per_layer + hd, d,
                                        ag + (size_t)g0 * d + hd, d, gn, st->n_ctx, dh, scale, s);
            }
            for (int i = 0; i < n; i++)
                memcpy(att + (size_t)order[i] * d, ag + (size_t)i * d, sizeof(float) * d);
        }
        sotto_linear_acc(&L->co.w, L->co.b, att, n, x);

        /* MLP */
        sotto_layer_norm(x, h, n, d, L->mlp_ln.g, L->mlp_ln.b, 1e-5f);
        sotto_linear(&L->fc1.w, L->fc1.b, h, n, f);
        sotto_gelu(f, (size_t)n * ff);
        sotto_linear_acc(&L->fc2.w, L->fc2.b, f, n, x);
    }
    return SOTTO_OK;
}

static int embed(const sotto_model *m, const int32_t *tokens, const row_ref *rows, int n, float *x,
                 sotto_err *err) {
    const int d = m->hp.n_text_state;
    for (int i = 0; i < n; i++) {
        if (tokens[i] < 0 || tokens[i] >= m->hp.n_vocab)
            return sotto_err_set(err, SOTTO_E_INVALID, "token id %d out of range 0..%d", tokens[i],
                                 m->hp.n_vocab - 1);
        if (rows[i].pos >= m->hp.n_text_ctx)
            return sotto_err_set(err, SOTTO_E_RANGE, "decoder context of %d tokens is full",
                                 m->hp.n_text_ctx);
        const float *p = m->dec_pos + (size_t)rows[i].pos * d;
        float *xr = x + (size_t)i * d;
        sotto_wmat_dequantize_rows(&m->emb, tokens[i], 1, xr);
        for (int c = 0; c < d; c++) xr[c] += p[c];
    }
    return SOTTO_OK;
}

/* Final layer norm of the listed rows of x and the vocabulary projection. */
static int project(const sotto_model *m, sotto_workspace *ws, const float *x, const int *which,
                   int n, float *logits, sotto_err *err) {
    const int d = m->hp.n_text_state;
    float *h = sotto_ws_get(ws, WS_LOGIT_ROWS, (size_t)n * d);
    if (!h) return sotto_err_set(err, SOTTO_E_NOMEM, "out of memory in the decoder");
    for (int i = 0; i < n; i++)
        sotto_layer_norm(x + (size_t)(which ? which[i] : i) * d, h + (size_t)i * d, 1, d,
                         m->dec_ln.g, m->dec_ln.b, 1e-5f);
    sotto_linear(&m->emb, NULL, h, n, logits);
    return SOTTO_OK;
}

int sotto_decode_tokens(const sotto_model *m, sotto_workspace *ws, sotto_state *st, int seq,
                        const int32_t *tokens, int n_tokens, const int *want, int n_want,
                        float *logits, sotto_err *err) {
    if (!st->encoded) return sotto_err_set(err, SOTTO_E_INVALID, "decode before encode");
    if (seq < 0 || seq >= st->max_seqs || n_tokens < 1)
        return sotto_err_set(err, SOTTO_E_INVALID, "bad sequence %d or token count %d", seq,
                             n_tokens);
    const int d = m->hp.n_text_state;
    int p0 = st->seq_len[seq];
    if (p0 + n_tokens > m->hp.n_text_ctx)
        return sotto_err_set(err, SOTTO_E_RANGE, "%d tokens exceed the decoder context of %d",
                             p0 + n_tokens, m->hp.n_text_ctx);
    for (int i = 0; i < n_want; i++)
        if (want[i] < 0 || want[i] >= n_tokens)
            return sotto_err_set(err, SOTTO_E_INVALID, "logits wanted for position %d of %d",
                                 want[i], n_tokens);
    float *x = sotto_ws_get(ws, WS_X, (size_t)n_tokens * d);
    row_ref *rr = (row_ref *)sotto_ws_get(ws, WS_TMP, row_ref_floats(n_tokens));
    if (!x || !rr) return sotto_err_set(err, SOTTO_E_NOMEM, "out of memory in the decoder");
    for (int i = 0; i < n_tokens; i++) rr[i] = (row_ref){st, seq, p0 + i};
    int rc = embed(m, tokens, rr, n_tokens, x, err);
    if (rc) return rc;
    if ((rc = m->be->decode(m, ws, rr, n_tokens, 1, x, want, n_want, logits, err))) return rc;
    st->seq_len[seq] = p0 + n_tokens;
    return SOTTO_OK;
}

int sotto_decode_step(const sotto_model *m, sotto_workspace *ws, sotto_state *const *states,
                      const int *seqs, const int32_t *tokens, int n, float *logits,
                      sotto_err *err) {
    if (n < 1) return SOTTO_OK;
    const int d = m->hp.n_text_state;
    float *x = sotto_ws_get(ws, WS_X, (size_t)n * d);
    row_ref *rows = (row_ref *)sotto_ws_get(ws, WS_TMP, row_ref_floats(n));
    if (!x || !rows) return sotto_err_set(err, SOTTO_E_NOMEM, "out of memory in the decoder");
    for (int i = 0; i < n; i++) {
        sotto_state *st = states[i];
        if (st->m != m || !st->encoded || seqs[i] < 0 || seqs[i] >= st->max_seqs)
            return sotto_err_set(err, SOTTO_E_INVALID, "bad state or sequence in row %d", i);
        rows[i] = (row_ref){st, seqs[i], st->seq_len[seqs[i]]};
        for (int j = 0; j < i; j++)
            if (rows[j].st == st && rows[j].seq == seqs[i])
                return sotto_err_set(err, SOTTO_E_INVALID, "sequence %d appears twice", seqs[i]);
    }
    int rc = embed(m, tokens, rows, n, x, err);
    if (rc) return rc;
    if ((rc = m->be->decode(m, ws, rows, n, 0, x, NULL, n, logits, err))) return rc;
    for (int i = 0; i < n; i++) rows[i].st->seq_len[rows[i].seq] = rows[i].pos + 1;
    return SOTTO_OK;
}

int sotto_cpu_decode(const sotto_model *m, sotto_workspace *ws, const sotto_row_ref *rows, int n,
                     int prompt, float *x, const int *want, int n_want, float *logits,
                     sotto_err *err) {
    int rc = run_layers(m, ws, rows, n, prompt, x, err);
    if (!rc && n_want > 0) rc = project(m, ws, x, want, n_want, logits, err);
    return rc;
}
