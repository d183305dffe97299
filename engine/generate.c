/* generate.c - decoding rules (see generate.h). */
#include "generate.h"

#include "beam_top.h"
#include "ops.h"
#include "state.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

sotto_generate_opts sotto_generate_default_opts(void) {
    sotto_generate_opts o;
    memset(&o, 0, sizeof o);
    o.beam_size = 1;
    o.patience = 1.0f;
    o.length_penalty = 1.0f;
    o.best_of = 1;
    o.max_initial_timestamp = 1.0f;
    o.seed = 0x5eed5eedULL;
    return o;
}

void sotto_generate_result_free(sotto_generate_result *r) {
    if (!r) return;
    free(r->tokens);
    memset(r, 0, sizeof *r);
}

/* ---- logits processing ------------------------------------------------ */

typedef struct rules {
    const sotto_special_tokens *sp;
    const sotto_generate_opts *o;
    int n_vocab;
    int timestamps;     /* apply timestamp rules */
    int has_prefix;     /* tokens were forced after the task tokens */
    int max_initial_id; /* last timestamp allowed first */
} rules;

static void disable_range(float *x, int from, int to) { /* [from, to) */
    for (int i = from; i < to; i++) x[i] = -INFINITY;
}

/* Turns raw logits into the log-probabilities that a step samples from,
 * given the g tokens this row generated so far (after any prefix). */
static void process_logits(const rules *R, float *x, const int32_t *gen, int g) {
    const sotto_special_tokens *sp = R->sp;
    const int V = R->n_vocab, tb = sp->timestamp_begin;
    for (int i = 0; i < R->o->n_suppress; i++) {
        int32_t t = R->o->suppress[i];
        if (t >= 0 && t < V) x[t] = -INFINITY;
    }
    if (g == 0) {
        for (int i = 0; i < R->o->n_suppress_begin; i++) {
            int32_t t = R->o->suppress_begin[i];
            if (t >= 0 && t < V) x[t] = -INFINITY;
        }
    }
    if (!R->timestamps) {
        sotto_log_softmax(x, V);
        return;
    }
    x[sp->no_timestamps] = -INFINITY;
    int check = 0;
    if (g == 0) {
        if (!R->has_prefix) {
            disable_range(x, 0, tb);
            disable_range(x, R->max_initial_id + 1, V);
        }
    } else {
        int32_t last = gen[g - 1];
        if (last >= tb) {
            int32_t penult = g >= 2 ? gen[g - 2] : last;
            if (penult >= tb) {
                disable_range(x, tb, V);
            } else {
                disable_range(x, 0, sp->eot);
                check = 1;
            }
        } else {
            check = 1;
        }
        for (int t = g - 1; t >= 0; t--) {
            if (gen[t] >= tb) {
                disable_range(x, tb, gen[t]);
                break;
            }
        }
    }
    if (check) {
        /* If the timestamps together are likelier than any text token,
         * a timestamp must come next. */
        float max_text = -INFINITY;
        for (int i = 0; i < tb; i++) max_text = x[i] > max_text ? x[i] : max_text;
        float tm = -INFINITY;
        for (int i = tb; i < V; i++) tm = x[i] > tm ? x[i] : tm;
        if (tm > -INFINITY) {
            double ts = 0.0;
            for (int i = tb; i < V; i++) ts += exp((double)(x[i] - tm));
            float ts_lse = tm + (float)log(ts);
            if (ts_lse > max_text) disable_range(x, 0, tb);
        }
    }
    sotto_log_softmax(x, V);
}

void sotto_apply_logit_rules(const sotto_special_tokens *sp, int n_vocab,
                             const sotto_generate_opts *o, int timestamps, int has_prefix,
                             const int32_t *gen, int g, float *logits) {
    rules R = {sp, o, n_vocab, timestamps, has_prefix, 0};
    R.max_initial_id = sp->timestamp_begin + (int)lroundf(o->max_initial_timestamp / 0.02f);
    if (R.max_initial_id > sp->timestamp_end) R.max_initial_id = sp->timestamp_end;
    process_logits(&R, logits, gen, g);
}

/* ---- random sampling ---------------------------------------------------- */

static uint64_t rng_next(uint64_t *s) { /* splitmix64 */
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static int32_t sample_token(const float *lp, int V, float temperature, uint64_t *rng) {
    float m = -INFINITY;
    for (int i = 0; i < V; i++) m = lp[i] > m ? lp[i] : m;
    double total = 0.0;
    for (int i = 0; i < V; i++)
        if (lp[i] > -INFINITY) total += exp((double)(lp[i] - m) / temperature);
    double u = (double)(rng_next(rng) >> 11) * (1.0 / 9007199254740992.0) * total;
    double acc = 0.0;
    int32_t last = 0;
    for (int i = 0; i < V; i++) {
        if (lp[i] == -INFINITY) continue;
        acc += exp((double)(lp[i] - m) / temperature);
        last = i;
        if (acc > u) return i;
    }
    return last;
}

static int32_t argmax(const float *x, int V) {
    int32_t best = 0;
    for (int i = 1; i < V; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

/* ---- prompt layout -------------------------------------------------------- */

typedef struct layout {
    int sot_index;  /* position of <|startoftranscript|> */
    int task_end;   /* index after sot and its language/task/notimestamps tokens */
    int n_prefix;   /* forced tokens after that */
    int timestamps; /* prompt's last task token is not <|notimestamps|> */
    int max_gen;    /* tokens that may be generated */
} layout;

static int plan(const sotto_model *m, const int32_t *prompt, int n, const sotto_generate_opts *o,
                layout *L, sotto_err *err) {
    const sotto_special_tokens *sp = sotto_model_special(m);
    const int ctx = sotto_model_hparams(m)->n_text_ctx;
    L->sot_index = -1;
    for (int i = 0; i < n; i++)
        if (prompt[i] == sp->sot) {
            L->sot_index = i;
            break;
        }
    if (L->sot_index < 0)
        return sotto_err_set(err, SOTTO_E_INVALID, "the prompt has no <|startoftranscript|>");
    int i = L->sot_index;
    while (i < n && prompt[i] >= sp->sot && prompt[i] <= sp->no_timestamps) i++;
    L->task_end = i;
    L->n_prefix = n - i;
    L->timestamps = prompt[i - 1] != sp->no_timestamps;
    int start_step = L->task_end == 1 ? 0 : L->task_end - 1;
    int total = o->max_new_tokens > 0 ? n + o->max_new_tokens : ctx;
    if (total > ctx) total = ctx;
    L->max_gen = total / 2 < total - start_step ? total / 2 : total - start_step;
    if (L->max_gen > ctx - n + 1) L->max_gen = ctx - n + 1; /* positions must fit */
    if (L->max_gen < 1)
        return sotto_err_set(err, SOTTO_E_RANGE, "a prompt of %d tokens leaves no room to decode",
                             n);
    return SOTTO_OK;
}

/* ---- greedy / sampling ---------------------------------------------------- */

typedef struct hyp {
    int32_t *tok;
    int n;
    float cum;
    int ended;
    int done;
} hyp;

static float finalize_score(float cum, int n, float lp) {
    return cum / powf((float)n, lp);
}

static int greedy(const sotto_model *m, sotto_workspace *ws, sotto_state *st, const rules *R,
                  const layout *L, const sotto_generate_opts *o, float *logits,
                  sotto_generate_result *out, sotto_err *err) {
    const int V = R->n_vocab;
    const int nh = o->temperature > 0.0f ? (o->best_of > 1 ? o->best_of : 1) : 1;
    int rc = SOTTO_OK;
    hyp *h = calloc((size_t)nh, sizeof *h);
    int32_t *toks = malloc(sizeof(int32_t) * (size_t)nh);
    int *seqs = malloc(sizeof(int) * (size_t)nh);
    sotto_state **sts = malloc(sizeof(sotto_state *) * (size_t)nh);
    float *lg = malloc(sizeof(float) * (size_t)V * nh);
    if (!h || !toks || !seqs || !sts || !lg) {
        rc = sotto_err_set(err, SOTTO_E_NOMEM, "out of memory while decoding");
        goto done;
    }
    for (int r = 0; r < nh; r++) {
        h[r].tok = malloc(sizeof(int32_t) * (size_t)L->max_gen);
        if (!h[r].tok) {
            rc = sotto_err_set(err, SOTTO_E_NOMEM, "out of memory while decoding");
            goto done;
        }
        memcpy(lg + (size_t)r * V, logits, sizeof(float) * V);
    }
    if (nh > 1) { /* every hypothesis starts from the prompt in sequence 0 */
        int dst[64], src[64];
        for (int r = 0; r < nh; r++) dst[r] = r, src[r] = 0;
        if ((rc = sotto_state_seq_gather(st, dst, src, nh))) {
            sotto_err_set(err, rc, "cannot replicate the decoder state");
            goto done;
        }
    }
    uint64_t rng = o->seed;
    for (int g = 0; g < L->max_gen; g++) {
        int n_alive = 0;
        for (int r = 0; r < nh; r++) {
            if (h[r].done) continue;
            float *x = lg + (size_t)r * V;
            process_logits(R, x, h[r].tok, h[r].n);
            int32_t t = o->temperature > 0.0f ? sample_token(x, V, o->temperature, &rng)
                                              : argmax(x, V);
            h[r].cum += x[t];
            if (t == R->sp->eot) {
                h[r].done = 1;
                h[r].ended = 1;
                continue;
            }
            h[r].tok[h[r].n++] = t;
            if (o->on_token && nh == 1 && o->on_token(o->user, t, x[t])) h[r].done = 1;
            if (g + 1 == L->max_gen) h[r].done = 1;
            if (!h[r].done) {
                toks[n_alive] = t;
                seqs[n_alive] = r;
                sts[n_alive] = st;
                n_alive++;
            }
        }
        if (n_alive == 0) break;
        float *step_logits = sotto_ws_get(ws, WS_GEN_LOGITS, (size_t)n_alive * V);
        if (!step_logits) {
            rc = sotto_err_set(err, SOTTO_E_NOMEM, "out of memory while decoding");
            goto done;
        }
        if ((rc = sotto_decode_step(m, ws, sts, seqs, toks, n_alive, step_logits, err))) goto done;
        for (int i = 0; i < n_alive; i++)
            memcpy(lg + (size_t)seqs[i] * V, step_logits + (size_t)i * V, sizeof(float) * V);
    }
    int best = 0;
    float best_score = -INFINITY;
    for (int r = 0; r < nh; r++) {
        float s = finalize_score(h[r].cum, h[r].n, o->length_penalty);
        if (r == 0 || s > best_score) {
            best = r;
            best_score = s;
        }
    }
    out->tokens = h[best].tok;
    h[best].tok = NULL;
    out->n_tokens = h[best].n;
    out->sum_logprob = h[best].cum;
    out->score = best_score;
    out->ended = h[best].ended;
done:
    if (h)
        for (int r = 0; r < nh; r++) free(h[r].tok);
    free(h);
    free(toks);
    free(seqs);
    free(sts);
    free(lg);
    return rc;
}

/* ---- beam search ------------------------------------------------------------ */

typedef sotto_beam_cand cand;

static int beam_search(const sotto_model *m, sotto_workspace *ws, sotto_state *st, const rules *R,
                       const layout *L, const sotto_generate_opts *o, const float *logits0,
                       sotto_generate_result *out, sotto_err *err) {
    const int V = R->n_vocab, B = o->beam_size, C = 2 * B, G = L->max_gen;
    int max_cand = (int)lroundf((float)B * o->patience);
    if (max_cand < 1) max_cand = 1;
    const int hyp_cap = max_cand + B;
    int rc = SOTTO_OK;
    int32_t *gen = malloc(sizeof(int32_t) * (size_t)B * G);
    int32_t *gen2 = malloc(sizeof(int32_t) * (size_t)B * G);
    int *len = calloc((size_t)B, sizeof(int)), *len2 = calloc((size_t)B, sizeof(int));
    float *cum = calloc((size_t)B, sizeof(float)), *cum2 = calloc((size_t)B, sizeof(float));
    float *lg = malloc(sizeof(float) * (size_t)V * B);
    cand *top = malloc(sizeof(cand) * (size_t)C);
    cand *rtop = malloc(sizeof(cand) * (size_t)C * B); /* each beam's own best C */
    int rn[64];
    hyp *hyps = calloc((size_t)hyp_cap, sizeof(hyp));
    int n_hyps = 0;
    int32_t toks[64];
    int seqs[64], src[64], active[64];
    sotto_state *sts[64];
    if (!gen || !gen2 || !len || !len2 || !cum || !cum2 || !lg || !top || !rtop || !hyps) {
        rc = sotto_err_set(err, SOTTO_E_NOMEM, "out of memory in beam search");
        goto done;
    }
    memcpy(lg, logits0, sizeof(float) * V);
    float *cur = lg; /* this step's logits: lg, then the decoder's output buffer */
    int n_alive = 1;
    for (int g = 0; g < G; g++) {
        int last_step = g + 1 == G;
        /* Each beam's log-softmax and its best C candidates, beams in
           parallel (a 51,864-token row each); then their merge in beam
           order, which keeps the ties of one pass over all (beam, token):
           lower beam, then lower token, first. */
#pragma omp parallel for schedule(static) if (n_alive > 1)
        for (int b = 0; b < n_alive; b++) {
            float *x = cur + (size_t)b * V;
            cand *t = rtop + (size_t)b * C;
            process_logits(R, x, gen + (size_t)b * G, len[b]);
            rn[b] = sotto_beam_row_top(x, V, cum[b], b, C, t);
        }
        int n_top = sotto_beam_merge(rtop, rn, n_alive, C, top);
        if (g == 0 && R->has_prefix) /* no early <|endoftext|> in secondary beams */
            for (int k = 1; k < n_top; k++)
                if (top[k].tok == R->sp->eot) top[k].tok = 0, top[k].score = -1e10f;
        int secondary = B;
        for (int k = 0; k < B && k < n_top; k++) {
            int next = k;
            if (top[k].tok == R->sp->eot || last_step) {
                hyp *hp = &hyps[n_hyps < hyp_cap ? n_hyps++ : hyp_cap - 1];
                const cand *c = &top[k];
                int n = len[c->beam] + (c->tok != R->sp->eot);
                free(hp->tok);
                hp->tok = malloc(sizeof(int32_t) * (size_t)(n ? n : 1));
                if (!hp->tok) {
                    rc = sotto_err_set(err, SOTTO_E_NOMEM, "out of memory in beam search");
                    goto done;
                }
                memcpy(hp->tok, gen + (size_t)c->beam * G, sizeof(int32_t) * (size_t)len[c->beam]);
                if (c->tok != R->sp->eot) hp->tok[n - 1] = c->tok;
                hp->n = n;
                hp->cum = c->score;
                hp->ended = c->tok == R->sp->eot;
                for (int j = secondary; j < n_top; j++) {
                    if (top[j].tok != R->sp->eot) {
                        next = j;
                        secondary = j + 1;
                        break;
                    }
                }
            }
            active[k] = next;
        }
        if (last_step || n_hyps >= max_cand || n_top == 0) break;
        /* new beams from the chosen candidates */
        for (int k = 0; k < B; k++) {
            const cand *c = &top[active[k] < n_top ? active[k] : 0];
            memcpy(gen2 + (size_t)k * G, gen + (size_t)c->beam * G,
                   sizeof(int32_t) * (size_t)len[c->beam]);
            gen2[(size_t)k * G + len[c->beam]] = c->tok;
            len2[k] = len[c->beam] + 1;
            cum2[k] = c->score;
            src[k] = c->beam;
            seqs[k] = k;
            toks[k] = c->tok;
            sts[k] = st;
        }
        int32_t *tg = gen;
        gen = gen2, gen2 = tg;
        int *tl = len;
        len = len2, len2 = tl;
        float *tc = cum;
        cum = cum2, cum2 = tc;
        if ((rc = sotto_state_seq_gather(st, seqs, src, B))) {
            sotto_err_set(err, rc, "cannot reorder the beams");
            goto done;
        }
        n_alive = B;
        float *step_logits = sotto_ws_get(ws, WS_GEN_LOGITS, (size_t)B * V);
        if (!step_logits) {
            rc = sotto_err_set(err, SOTTO_E_NOMEM, "out of memory in beam search");
            goto done;
        }
        if ((rc = sotto_decode_step(m, ws, sts, seqs, toks, B, step_logits, err))) goto done;
        cur = step_logits; /* read and rewritten in place before the next step */
    }
    if (n_hyps == 0) {
        rc = sotto_err_set(err, SOTTO_E_INTERNAL, "beam search produced no hypothesis");
        goto done;
    }
    int best = 0;
    float best_score = finalize_score(hyps[0].cum, hyps[0].n, o->length_penalty);
    for (int i = 1; i < n_hyps; i++) {
        float s = finalize_score(hyps[i].cum, hyps[i].n, o->length_penalty);
        if (s > best_score) best = i, best_score = s;
    }
    out->tokens = hyps[best].tok;
    hyps[best].tok = NULL;
    out->n_tokens = hyps[best].n;
    out->sum_logprob = hyps[best].cum;
    out->score = best_score;
    out->ended = hyps[best].ended;
done:
    if (hyps)
        for (int i = 0; i < hyp_cap; i++) free(hyps[i].tok);
    free(hyps);
    free(gen);
    free(gen2);
    free(len);
    free(len2);
    free(cum);
    free(cum2);
    free(lg);
    free(top);
    free(rtop);
    return rc;
}

/* ---- entry points ------------------------------------------------------------- */

static float softmax_prob(const float *x, int V, int idx) {
    float m = -INFINITY;
    for (int i = 0; i < V; i++) m = x[i] > m ? x[i] : m;
    double s = 0.0;
    for (int i = 0; i < V; i++) s += exp((double)(x[i] - m));
    return (float)(exp((double)(x[idx] - m)) / s);
}

int sotto_generate(const sotto_model *m, sotto_workspace *ws, sotto_state *st,
                   const int32_t *prompt, int n_prompt, const sotto_generate_opts *o,
                   sotto_generate_result *out, sotto_err *err) {
    memset(out, 0, sizeof *out);
    const sotto_special_tokens *sp = sotto_model_special(m);
    const int V = sotto_model_hparams(m)->n_vocab;
    if (o->beam_size < 1 || o->beam_size > 32 || o->best_of < 1 || o->best_of > 32)
        return sotto_err_set(err, SOTTO_E_INVALID, "beam size %d / best_of %d out of range 1..32",
                             o->beam_size, o->best_of);
    if (o->temperature > 0.0f && o->beam_size > 1)
        return sotto_err_set(err, SOTTO_E_INVALID, "sampling (temperature > 0) needs beam size 1");
    if (!(o->temperature >= 0.0f) || !(o->length_penalty >= 0.0f) || !(o->patience > 0.0f))
        return sotto_err_set(err, SOTTO_E_INVALID, "bad temperature, patience or length penalty");
    int need = o->temperature > 0.0f ? o->best_of : o->beam_size;
    if (need > sotto_state_max_seqs(st))
        return sotto_err_set(err, SOTTO_E_INVALID, "the state holds %d sequences, %d needed",
                             sotto_state_max_seqs(st), need);
    layout L;
    memset(&L, 0, sizeof L);
    int rc = plan(m, prompt, n_prompt, o, &L, err);
    if (rc) return rc;
    rules R = {sp, o, V, L.timestamps, L.n_prefix > 0, 0};
    R.max_initial_id = sp->timestamp_begin + (int)lroundf(o->max_initial_timestamp / 0.02f);
    if (R.max_initial_id > sp->timestamp_end) R.max_initial_id = sp->timestamp_end;

    float *logits = malloc(sizeof(float) * (size_t)V * 2);
    if (!logits) return sotto_err_set(err, SOTTO_E_NOMEM, "out of memory while decoding");
    int want[2] = {L.sot_index, n_prompt - 1};
    int n_want = want[0] == want[1] ? 1 : 2;
    if ((rc = sotto_state_seq_truncate(st, 0, 0))) {
        sotto_err_set(err, rc, "cannot reset the decoder state");
        goto done;
    }
    if ((rc = sotto_decode_tokens(m, ws, st, 0, prompt, n_prompt, want, n_want, logits, err)))
        goto done;
    out->no_speech_prob = sp->no_speech >= 0 ? softmax_prob(logits, V, sp->no_speech) : 0.0f;
    const float *first = logits + (size_t)(n_want - 1) * V;
    rc = o->beam_size > 1 ? beam_search(m, ws, st, &R, &L, o, first, out, err)
                          : greedy(m, ws, st, &R, &L, o, (float *)first, out, err);
    if (rc == SOTTO_OK) {
        float n = (float)out->n_tokens;
        out->avg_logprob = out->score * powf(n, o->length_penalty) / (n + 1.0f);
    }
done:
    free(logits);
    return rc;
}

int sotto_detect_language(const sotto_model *m, sotto_workspace *ws, sotto_state *st,
                          float *probs, int *best, sotto_err *err) {
    const sotto_special_tokens *sp = sotto_model_special(m);
    const int V = sotto_model_hparams(m)->n_vocab;
    if (!sotto_model_is_multilingual(m) || sp->n_langs <= 0)
        return sotto_err_set(err, SOTTO_E_INVALID, "language detection needs a multilingual model");
    float *logits = malloc(sizeof(float) * (size_t)V);
    if (!logits) return sotto_err_set(err, SOTTO_E_NOMEM, "out of memory");
    int rc = sotto_state_seq_truncate(st, 0, 0);
    int32_t sot = sp->sot;
    int want = 0;
    if (rc == SOTTO_OK) rc = sotto_decode_tokens(m, ws, st, 0, &sot, 1, &want, 1, logits, err);
    if (rc == SOTTO_OK) {
        const float *x = logits + sp->lang_begin;
        float mx = -INFINITY;
        for (int i = 0; i < sp->n_langs; i++) mx = x[i] > mx ? x[i] : mx;
        double s = 0.0;
        for (int i = 0; i < sp->n_langs; i++) s += exp((double)(x[i] - mx));
        *best = 0;
        for (int i = 0; i < sp->n_langs; i++) {
            probs[i] = (float)(exp((double)(x[i] - mx)) / s);
            if (probs[i] > probs[*best]) *best = i;
        }
    }
    free(logits);
    return rc;
}

/* ---- batched greedy ---------------------------------------------------------- */

typedef struct batch_row {
    rules R;
    layout L;
    sotto_generate_opts o; /* per-row copy: suppress_begin may be cleared */
    int32_t *gen;
    int n;
    float cum;
    int done, ended;
} batch_row;

int sotto_generate_greedy_batch(const sotto_model *m, sotto_workspace *ws, sotto_gen_job *jobs,
                                int n, const sotto_generate_opts *o, sotto_err *err) {
    const sotto_special_tokens *sp = sotto_model_special(m);
    const int V = sotto_model_hparams(m)->n_vocab;
    int rc = SOTTO_OK;
    batch_row *rows = calloc((size_t)(n > 0 ? n : 1), sizeof *rows);
    float *lg = malloc(sizeof(float) * (size_t)V * (size_t)(n + 2)); /* n rows + 2 scratch */
    sotto_state **sts = malloc(sizeof *sts * (size_t)(n > 0 ? n : 1));
    int *seqs = calloc((size_t)(n > 0 ? n : 1), sizeof(int));
    int32_t *toks = malloc(sizeof(int32_t) * (size_t)(n > 0 ? n : 1));
    int *which = malloc(sizeof(int) * (size_t)(n > 0 ? n : 1));
    if (!rows || !lg || !sts || !seqs || !toks || !which) {
        rc = sotto_err_set(err, SOTTO_E_NOMEM, "out of memory in batched decoding");
        goto done;
    }
    /* prompts, one job at a time (their lengths differ) */
    for (int i = 0; i < n; i++) {
        sotto_gen_job *j = &jobs[i];
        batch_row *r = &rows[i];
        memset(&j->res, 0, sizeof j->res);
        j->status = SOTTO_OK;
        r->done = 1;
        r->o = *o;
        r->o.max_new_tokens = j->max_new_tokens;
        sotto_err jerr;
        int jrc = plan(m, j->prompt, j->n_prompt, &r->o, &r->L, &jerr);
        if (jrc == SOTTO_OK && r->L.n_prefix > 0 && !j->begin_after_prefix) r->o.n_suppress_begin = 0;
        r->R = (rules){sp, &r->o, V, r->L.timestamps, r->L.n_prefix > 0, 0};
        r->R.max_initial_id = sp->timestamp_begin + (int)lroundf(o->max_initial_timestamp / 0.02f);
        if (r->R.max_initial_id > sp->timestamp_end) r->R.max_initial_id = sp->timestamp_end;
        if (jrc == SOTTO_OK) jrc = sotto_state_seq_truncate(j->st, 0, 0);
        int want[2] = {r->L.sot_index, j->n_prompt - 1};
        int n_want = want[0] == want[1] ? 1 : 2;
        float *two = lg + (size_t)V * n; /* scratch after the per-row logits */
        if (jrc == SOTTO_OK)
            jrc = sotto_decode_tokens(m, ws, j->st, 0, j->prompt, j->n_prompt, want, n_want, two,
                                      &jerr);
        if (jrc == SOTTO_OK && !(r->gen = malloc(sizeof(int32_t) * (size_t)r->L.max_gen)))
            jrc = SOTTO_E_NOMEM;
        if (jrc) {
            j->status = jrc;
            continue;
        }
        j->res.no_speech_prob = sp->no_speech >= 0 ? softmax_prob(two, V, sp->no_speech) : 0.0f;
        memcpy(lg + (size_t)i * V, two + (size_t)(n_want - 1) * V, sizeof(float) * V);
        r->done = 0;
    }
    /* lockstep greedy steps over every row still generating */
    for (;;) {
        int alive = 0;
        for (int i = 0; i < n; i++) {
            batch_row *r = &rows[i];
            if (r->done) continue;
            float *x = lg + (size_t)i * V;
            process_logits(&r->R, x, r->gen, r->n);
            int32_t t = argmax(x, V);
            r->cum += x[t];
            if (t == sp->eot) {
                r->done = r->ended = 1;
                continue;
            }
            r->gen[r->n++] = t;
            if (jobs[i].on_token && jobs[i].on_token(jobs[i].user, t, x[t])) r->done = 1;
            if (r->n == r->L.max_gen) r->done = 1;
            if (r->done) continue;
            sts[alive] = jobs[i].st;
            toks[alive] = t;
            which[alive] = i;
            alive++;
        }
        if (!alive) break;
        float *out = sotto_ws_get(ws, WS_GEN_LOGITS, (size_t)alive * V);
        if (!out) {
            rc = sotto_err_set(err, SOTTO_E_NOMEM, "out of memory in batched decoding");
            goto done;
        }
        if ((rc = sotto_decode_step(m, ws, sts, seqs, toks, alive, out, err))) goto done;
        for (int a = 0; a < alive; a++)
            memcpy(lg + (size_t)which[a] * V, out + (size_t)a * V, sizeof(float) * V);
    }
    for (int i = 0; i < n; i++) {
        batch_row *r = &rows[i];
        if (jobs[i].status) continue;
        float len = (float)r->n;
        jobs[i].res.tokens = r->gen;
        r->gen = NULL;
        jobs[i].res.n_tokens = r->n;
        jobs[i].res.sum_logprob = r->cum;
        jobs[i].res.score = finalize_score(r->cum, r->n, o->length_penalty);
        jobs[i].res.avg_logprob = r->cum / (len + 1.0f);
        jobs[i].res.ended = r->ended;
    }
done:
    if (rows)
        for (int i = 0; i < n; i++) free(rows[i].gen);
    free(rows);
    free(lg);
    free(sts);
    free(seqs);
    free(toks);
    free(which);
    return rc;
}
