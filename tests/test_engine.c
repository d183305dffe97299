/* test_engine.c - engine invariants on the real tiny.en model:
 *   - prompt processing and step-by-step decoding give the same logits;
 *   - batched steps across states and sequences equal single steps;
 *   - sequence copies/permutations of the KV cache;
 *   - results do not depend on the thread count;
 *   - cut windows (sotto_encode_batch_ctx): independent of their batch, and
 *     decoding reads no cross-attention row past the positions encoded;
 *   - Whisper's logit rules (suppression, timestamp rules) on handmade logits;
 *   - generate(): greedy == beam 1, callbacks, length limits, seeded sampling;
 *   - sotto_generate_greedy_batch's begin_after_prefix: after a forced prefix
 *     over silence the decoder ends at once, unless the flag keeps the blank
 *     and <|endoftext|> from coming first (a lead that is not this window's
 *     text, server/worker.c).
 */
#include "check.h"
#include "backend.h" /* white-box: poisons the CPU's cross-attention rows past n_ctx */
#include "decoding.h"
#include "generate.h"
#include "tokenizer.h"
#include "threads.h"
#include "whisper.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The log-mel window of n samples (at most 30 s), zeros after them. */
static float *window_of(const sotto_model *m, const float *audio, size_t n) {
    const sotto_hparams *hp = sotto_model_hparams(m);
    float *mel = NULL;
    size_t nf = 0;
    sotto_err err;
    CHECK(sotto_mel_compute(sotto_model_mel(m), audio, n, SOTTO_HOP, 0, &mel, &nf, &err) == 0);
    float *win = calloc((size_t)hp->n_mels * SOTTO_N_FRAMES, sizeof(float));
    size_t nc = nf > 0 ? nf - 1 : 0;
    if (nc > SOTTO_N_FRAMES) nc = SOTTO_N_FRAMES;
    for (int c = 0; mel && win && c < hp->n_mels; c++)
        memcpy(win + (size_t)c * SOTTO_N_FRAMES, mel + (size_t)c * nf, sizeof(float) * nc);
    free(mel);
    return win;
}

static float *synthetic_window(const sotto_model *m) {
    size_t n = SOTTO_N_SAMPLES / 3; /* 10 s of a chirp with harmonics */
    float *audio = malloc(sizeof(float) * n);
    for (size_t i = 0; i < n; i++) {
        double t = (double)i / SOTTO_SAMPLE_RATE;
        audio[i] = (float)(0.2 * sin(6.283185307 * (150 + 40 * t) * t) +
                           0.1 * sin(6.283185307 * (450 + 120 * t) * t) * sin(3.0 * t));
    }
    float *win = window_of(m, audio, n);
    free(audio);
    return win;
}

static void test_decoder_consistency(const sotto_model *m, const float *win) {
    const sotto_hparams *hp = sotto_model_hparams(m);
    const sotto_special_tokens *sp = sotto_model_special(m);
    const int V = hp->n_vocab;
    sotto_err err;
    sotto_workspace *ws = sotto_workspace_create();
    sotto_state *a = sotto_state_create(m, 3, &err), *b = sotto_state_create(m, 3, &err);
    CHECK(a && b && ws);
    CHECK(sotto_encode(m, ws, a, win, &err) == 0);
    CHECK(sotto_encode(m, ws, b, win, &err) == 0);
    int32_t toks[5] = {sp->sot, 1002, 257, 3290, sp->timestamp_begin + 12};
    int want[5] = {0, 1, 2, 3, 4};
    float *lp = malloc(sizeof(float) * V * 5), *ls = malloc(sizeof(float) * V * 5);
    CHECK(sotto_decode_tokens(m, ws, a, 0, toks, 5, want, 5, lp, &err) == 0);
    CHECK_EQ_INT(sotto_state_seq_len(a, 0), 5);
    /* the same tokens one by one in b, sequence 2 */
    CHECK(sotto_decode_tokens(m, ws, b, 2, toks, 1, want, 1, ls, &err) == 0);
    for (int i = 1; i < 5; i++) {
        sotto_state *sts[1] = {b};
        int seq = 2;
        CHECK(sotto_decode_step(m, ws, sts, &seq, &toks[i], 1, ls + (size_t)i * V, &err) == 0);
    }
    double e = check_rel_err_f(ls, lp, (size_t)V * 5);
    CHECK_MSG(e < 1e-4, "prompt vs steps: %g", e);

    /* batched: rows (a,0), (b,2), (a,1) after copying a0 -> a1 */
    int dst[1] = {1}, src[1] = {0};
    CHECK(sotto_state_seq_gather(a, dst, src, 1) == 0);
    CHECK_EQ_INT(sotto_state_seq_len(a, 1), 5);
    sotto_state *sts[3] = {a, b, a};
    int seqs[3] = {0, 2, 1};
    int32_t nt[3] = {220, 220, 764};
    float *lb = malloc(sizeof(float) * V * 3);
    CHECK(sotto_decode_step(m, ws, sts, seqs, nt, 3, lb, &err) == 0);
    CHECK_MSG(check_rel_err_f(lb, lb + V, V) < 1e-4, "same history + token, different state: %g",
              check_rel_err_f(lb, lb + V, V));
    /* single steps from the same histories */
    sotto_state_seq_truncate(a, 0, 5);
    sotto_state_seq_truncate(a, 1, 5);
    float *l1 = malloc(sizeof(float) * V);
    sotto_state *one[1] = {a};
    int s1 = 1;
    CHECK(sotto_decode_step(m, ws, one, &s1, &nt[2], 1, l1, &err) == 0);
    CHECK_MSG(check_rel_err_f(l1, lb + 2 * V, V) < 1e-4, "batched vs single: %g", check_rel_err_f(l1, lb + 2 * V, V));
    /* a row may not appear twice */
    sotto_state *dup[2] = {a, a};
    int dseq[2] = {0, 0};
    CHECK(sotto_decode_step(m, ws, dup, dseq, nt, 2, lb, &err) == SOTTO_E_INVALID);
    /* permutation: swap 0 and 1 after giving them different tails */
    sotto_state_seq_truncate(a, 0, 5);
    sotto_state_seq_truncate(a, 1, 3);
    int pd[2] = {0, 1}, ps[2] = {1, 0};
    CHECK(sotto_state_seq_gather(a, pd, ps, 2) == 0);
    CHECK_EQ_INT(sotto_state_seq_len(a, 0), 3);
    CHECK_EQ_INT(sotto_state_seq_len(a, 1), 5);
    /* context overflow is an error, not a crash */
    int32_t many[449];
    for (int i = 0; i < 449; i++) many[i] = 100 + i;
    CHECK(sotto_decode_tokens(m, ws, a, 2, many, 449, want, 0, NULL, &err) == SOTTO_E_RANGE);
    int32_t bad = V + 5;
    CHECK(sotto_decode_tokens(m, ws, a, 2, &bad, 1, want, 0, NULL, &err) == SOTTO_E_INVALID);
    free(lp), free(ls), free(lb), free(l1);
    sotto_state_free(a);
    sotto_state_free(b);
    sotto_workspace_free(ws);
}

static void test_threads(const sotto_model *m, const float *win) {
    const sotto_hparams *hp = sotto_model_hparams(m);
    sotto_err err;
    sotto_workspace *ws = sotto_workspace_create();
    sotto_state *a = sotto_state_create(m, 1, &err), *b = sotto_state_create(m, 1, &err);
    size_t n = (size_t)hp->n_audio_ctx * hp->n_audio_state;
    sotto_threads_set(1);
    CHECK(sotto_encode(m, ws, a, win, &err) == 0);
    sotto_threads_set(2);
    CHECK(sotto_encode(m, ws, b, win, &err) == 0);
    double e = check_rel_err_f(sotto_state_encoder_output(a), sotto_state_encoder_output(b), n);
    CHECK_MSG(e < 1e-5, "encoder 1 vs 2 threads: %g", e);
    sotto_state_free(a);
    sotto_state_free(b);
    sotto_workspace_free(ws);
}

/* sotto_encode_batch of 3 different windows == three sotto_encode calls
 * (encoder output and the cross-attention K/V that decoding reads). */
static void test_encode_batch(const sotto_model *m, const float *win) {
    const sotto_hparams *hp = sotto_model_hparams(m);
    const size_t nw = (size_t)hp->n_mels * SOTTO_N_FRAMES;
    const size_t n = (size_t)hp->n_audio_ctx * hp->n_audio_state;
    sotto_err err;
    sotto_workspace *ws = sotto_workspace_create();
    float *w2 = malloc(sizeof(float) * nw), *w3 = malloc(sizeof(float) * nw);
    for (size_t i = 0; i < nw; i++) {
        w2[i] = win[nw - 1 - i];             /* another window */
        w3[i] = win[i] * 0.5f - 0.25f;       /* and another */
    }
    const float *mels[3] = {win, w2, w3};
    sotto_state *one[3], *bat[3];
    for (int i = 0; i < 3; i++) {
        one[i] = sotto_state_create(m, 1, &err);
        bat[i] = sotto_state_create(m, 1, &err);
        CHECK(sotto_encode(m, ws, one[i], mels[i], &err) == 0);
    }
    CHECK(sotto_encode_batch(m, ws, bat, mels, 3, &err) == 0);
    int32_t toks[3] = {sotto_model_special(m)->sot, 1002, 257};
    int want[3] = {0, 1, 2};
    const int V = hp->n_vocab;
    float *la = malloc(sizeof(float) * V * 3), *lb = malloc(sizeof(float) * V * 3);
    for (int i = 0; i < 3; i++) {
        double e = check_rel_err_f(sotto_state_encoder_output(bat[i]), sotto_state_encoder_output(one[i]), n);
        /* more GEMM rows: another blocking, another summation order (~2e-5 seen) */
        CHECK_MSG(e < 1e-4, "window %d: batched vs single encoder output: %g", i, e);
        CHECK(sotto_decode_tokens(m, ws, one[i], 0, toks, 3, want, 3, la, &err) == 0);
        CHECK(sotto_decode_tokens(m, ws, bat[i], 0, toks, 3, want, 3, lb, &err) == 0);
        e = check_rel_err_f(lb, la, (size_t)V * 3);
        CHECK_MSG(e < 1e-4, "window %d: logits after a batched vs single encode: %g", i, e);
    }
    /* the windows really differ (the batch did not just repeat one) */
    CHECK(check_rel_err_f(sotto_state_encoder_output(bat[1]), sotto_state_encoder_output(bat[0]), n) > 1e-2);
    sotto_state *dup[2] = {bat[0], bat[0]};
    CHECK(sotto_encode_batch(m, ws, dup, mels, 2, &err) == SOTTO_E_INVALID);
    CHECK(sotto_encode_batch(m, ws, bat, mels, 0, &err) == SOTTO_E_INVALID);
    for (int i = 0; i < 3; i++) sotto_state_free(one[i]), sotto_state_free(bat[i]);
    free(w2), free(w3), free(la), free(lb);
    sotto_workspace_free(ws);
}

static int count_finite(const float *x, int n) {
    int k = 0;
    for (int i = 0; i < n; i++) k += isfinite(x[i]);
    return k;
}

/* Windows cut to their first n_ctx encoder positions (whisper.cpp's audio_ctx). */
static void test_encode_ctx(const sotto_model *m, const float *win) {
    const sotto_hparams *hp = sotto_model_hparams(m);
    const int T = hp->n_audio_ctx, d = hp->n_audio_state, V = hp->n_vocab;
    const size_t nw = (size_t)hp->n_mels * SOTTO_N_FRAMES;
    sotto_err err;
    sotto_workspace *ws = sotto_workspace_create();
    float *w2 = malloc(sizeof(float) * nw), *w3 = malloc(sizeof(float) * nw);
    for (size_t i = 0; i < nw; i++) w2[i] = win[nw - 1 - i], w3[i] = win[i] * 0.5f - 0.25f;
    const float *mels[3] = {win, w2, w3};

    /* n_ctx = n_audio_ctx everywhere is exactly the whole-window encoder */
    sotto_state *a = sotto_state_create(m, 1, &err), *b = sotto_state_create(m, 1, &err);
    int full[1] = {T};
    CHECK(sotto_encode(m, ws, a, win, &err) == 0);
    CHECK(sotto_encode_batch_ctx(m, ws, &b, mels, full, 1, &err) == 0);
    CHECK(memcmp(sotto_state_encoder_output(a), sotto_state_encoder_output(b),
                 sizeof(float) * (size_t)T * d) == 0);
    CHECK_EQ_INT(sotto_state_encoded_positions(b), T);

    /* three windows of different lengths in one batch == each alone */
    int n_ctx[3] = {T, 500, 150};
    sotto_state *one[3], *bat[3];
    for (int i = 0; i < 3; i++) {
        one[i] = sotto_state_create(m, 1, &err);
        bat[i] = sotto_state_create(m, 1, &err);
        CHECK(sotto_encode_batch_ctx(m, ws, &one[i], &mels[i], &n_ctx[i], 1, &err) == 0);
        CHECK_EQ_INT(sotto_state_encoded_positions(one[i]), n_ctx[i]);
    }
    CHECK(sotto_encode_batch_ctx(m, ws, bat, mels, n_ctx, 3, &err) == 0);
    for (int i = 0; i < 3; i++) {
        double e = check_rel_err_f(sotto_state_encoder_output(bat[i]), sotto_state_encoder_output(one[i]),
                                   (size_t)n_ctx[i] * d);
        CHECK_MSG(e < 1e-4, "window %d (%d positions): batched vs alone: %g", i, n_ctx[i], e);
        CHECK_EQ_INT(sotto_state_encoded_positions(bat[i]), n_ctx[i]);
    }
    /* a cut window is not the whole window's first rows: attention saw less */
    CHECK(check_rel_err_f(sotto_state_encoder_output(one[2]), sotto_state_encoder_output(a),
                          (size_t)150 * d) > 1e-3);

    /* decoding after a cut encode reads only its rows: NaN in every row past
       them changes nothing (prompt and step paths) */
    int32_t toks[3] = {sotto_model_special(m)->sot, 1002, 257};
    int want[3] = {0, 1, 2};
    float *la = malloc(sizeof(float) * V * 4), *lb = malloc(sizeof(float) * V * 4);
    sotto_state *c = sotto_state_create(m, 1, &err);
    CHECK(sotto_encode(m, ws, c, w3, &err) == 0); /* whole window first: stale rows behind */
    CHECK(sotto_encode_batch_ctx(m, ws, &c, &mels[2], &n_ctx[2], 1, &err) == 0);
    CHECK(sotto_decode_tokens(m, ws, one[2], 0, toks, 3, want, 3, la, &err) == 0);
    const size_t per_layer = (size_t)T * hp->n_text_state;
    sotto_cpu_kv *kv = sotto_cpu_kv_of(c);
    for (int l = 0; l < hp->n_text_layer; l++) {
        for (size_t r = (size_t)n_ctx[2] * hp->n_text_state; r < per_layer; r++)
            kv->cross_v[l * per_layer + r] = NAN;
        for (int f = 0; f < hp->n_text_state; f++) /* K is transposed on the CPU (state.h) */
            for (int t = n_ctx[2]; t < T; t++) kv->cross_k[l * per_layer + (size_t)f * T + t] = NAN;
    }
    CHECK(sotto_decode_tokens(m, ws, c, 0, toks, 3, want, 3, lb, &err) == 0);
    CHECK(count_finite(lb, 3 * V) == 3 * V);
    CHECK_MSG(check_rel_err_f(lb, la, (size_t)V * 3) < 1e-5, "prompt after a cut encode: %g",
              check_rel_err_f(lb, la, (size_t)V * 3));
    int32_t next = 764;
    int seq = 0;
    sotto_state *sc1[1] = {one[2]}, *sc2[1] = {c};
    CHECK(sotto_decode_step(m, ws, sc1, &seq, &next, 1, la + 3 * V, &err) == 0);
    CHECK(sotto_decode_step(m, ws, sc2, &seq, &next, 1, lb + 3 * V, &err) == 0);
    CHECK(count_finite(lb + 3 * V, V) == V);
    CHECK_MSG(check_rel_err_f(lb + 3 * V, la + 3 * V, V) < 1e-5, "step after a cut encode: %g",
              check_rel_err_f(lb + 3 * V, la + 3 * V, V));

    /* bounds */
    int bad[2] = {0, T + 1};
    CHECK(sotto_encode_batch_ctx(m, ws, &a, mels, &bad[0], 1, &err) == SOTTO_E_INVALID);
    CHECK(sotto_encode_batch_ctx(m, ws, &a, mels, &bad[1], 1, &err) == SOTTO_E_INVALID);
    /* positions for an amount of audio: whole seconds of 50, at least 1 s, at most 30 s */
    CHECK_EQ_INT(sotto_encoder_positions(m, 0, 0), 50);
    CHECK_EQ_INT(sotto_encoder_positions(m, 16000, 0), 50);
    CHECK_EQ_INT(sotto_encoder_positions(m, 16001, 0), 100);
    CHECK_EQ_INT(sotto_encoder_positions(m, 5 * 16000 + 1, 16000), 350);
    CHECK_EQ_INT(sotto_encoder_positions(m, 29 * 16000, 16000), T);
    CHECK_EQ_INT(sotto_encoder_positions(m, 40 * 16000, 16000), T);

    for (int i = 0; i < 3; i++) sotto_state_free(one[i]), sotto_state_free(bat[i]);
    sotto_state_free(a), sotto_state_free(b), sotto_state_free(c);
    free(w2), free(w3), free(la), free(lb);
    sotto_workspace_free(ws);
}

static void test_rules(void) {
    /* a made-up vocabulary: 0..9 text, 10 eot, 11 sot, 12 nospeech,
     * 13 notimestamps, 14..29 timestamps (0.00 .. 0.30 s) */
    sotto_special_tokens sp;
    memset(&sp, -1, sizeof sp);
    sp.eot = 10, sp.sot = 11, sp.no_speech = 12, sp.no_timestamps = 13;
    sp.timestamp_begin = 14, sp.timestamp_end = 29;
    const int V = 30;
    sotto_generate_opts o = sotto_generate_default_opts();
    int32_t sup[2] = {3, 11}, begin[2] = {5, 10};
    o.suppress = sup, o.n_suppress = 2, o.suppress_begin = begin, o.n_suppress_begin = 2;
    o.max_initial_timestamp = 0.1f; /* -> up to timestamp_begin + 5 */
    float x[30];
    for (int i = 0; i < V; i++) x[i] = 0.1f * (float)(i % 7);

    /* first step, timestamps on: only timestamps 14..19 */
    float y[30];
    memcpy(y, x, sizeof y);
    sotto_apply_logit_rules(&sp, V, &o, 1, 0, NULL, 0, y);
    int ok = 1;
    for (int i = 0; i < V; i++) ok &= (i >= 14 && i <= 19) == (y[i] > -INFINITY);
    CHECK_MSG(ok, "first step must be a timestamp <= max_initial");
    double s = 0;
    for (int i = 0; i < V; i++) s += exp(y[i]);
    CHECK_NEAR(s, 1.0, 1e-5);

    /* first step, no timestamps: suppress + begin-suppress only */
    memcpy(y, x, sizeof y);
    sotto_apply_logit_rules(&sp, V, &o, 0, 0, NULL, 0, y);
    CHECK(y[3] == -INFINITY && y[11] == -INFINITY && y[5] == -INFINITY && y[10] == -INFINITY);
    CHECK_EQ_INT(count_finite(y, V), V - 4);

    /* later step: begin-suppression no longer applies */
    int32_t g1[2] = {14, 7};
    memcpy(y, x, sizeof y);
    sotto_apply_logit_rules(&sp, V, &o, 0, 0, g1, 2, y);
    CHECK(y[5] > -INFINITY && y[10] > -INFINITY && y[3] == -INFINITY);

    /* after text then one timestamp: no text (< eot) may follow; eot may */
    int32_t g2[3] = {14, 7, 20};
    memcpy(y, x, sizeof y);
    y[10] = 5.0f; /* eot likelier than all timestamps together */
    sotto_apply_logit_rules(&sp, V, &o, 1, 0, g2, 3, y);
    ok = 1;
    for (int i = 0; i < 10; i++) ok &= y[i] == -INFINITY;
    CHECK_MSG(ok, "text after a closing timestamp");
    CHECK(y[10] > -INFINITY);
    /* ... and timestamps may not decrease */
    for (int i = 14; i < 20; i++) ok &= y[i] == -INFINITY;
    CHECK_MSG(ok, "decreasing timestamp allowed");
    CHECK(y[20] > -INFINITY && y[25] > -INFINITY);

    /* two timestamps in a row: next must not be a timestamp */
    int32_t g3[4] = {14, 7, 20, 20};
    memcpy(y, x, sizeof y);
    sotto_apply_logit_rules(&sp, V, &o, 1, 0, g3, 4, y);
    ok = 1;
    for (int i = 14; i < V; i++) ok &= y[i] == -INFINITY;
    CHECK_MSG(ok, "timestamp after a timestamp pair");
    CHECK(y[7] > -INFINITY);

    /* timestamps jointly likelier than any text token: text is masked */
    int32_t g4[2] = {14, 7};
    for (int i = 0; i < V; i++) y[i] = i >= 14 ? 1.0f : 2.0f; /* 16 ts at e^1 > one text at e^2 */
    sotto_apply_logit_rules(&sp, V, &o, 1, 0, g4, 2, y);
    ok = 1;
    for (int i = 0; i < 14; i++) ok &= y[i] == -INFINITY;
    CHECK_MSG(ok, "timestamp mass rule");
    for (int i = 0; i < V; i++) y[i] = i >= 14 ? -3.0f : 2.0f;
    sotto_apply_logit_rules(&sp, V, &o, 1, 0, g4, 2, y);
    CHECK(y[7] > -INFINITY && y[20] > -INFINITY);

    /* with a forced prefix the first free step has no initial-timestamp rule */
    memcpy(y, x, sizeof y);
    sotto_apply_logit_rules(&sp, V, &o, 1, 1, NULL, 0, y);
    CHECK(y[7] > -INFINITY && y[25] > -INFINITY && y[13] == -INFINITY);
}

typedef struct tok_log {
    int32_t t[512];
    int n;
} tok_log;

static int on_token(void *user, int32_t token, float logprob) {
    tok_log *l = user;
    if (l->n < 512) l->t[l->n++] = token;
    (void)logprob;
    return 0;
}

static void test_generate(const sotto_model *m, const float *win) {
    const sotto_special_tokens *sp = sotto_model_special(m);
    sotto_err err;
    sotto_workspace *ws = sotto_workspace_create();
    sotto_state *st = sotto_state_create(m, 5, &err);
    CHECK(sotto_encode(m, ws, st, win, &err) == 0);
    int32_t prompt[1] = {sp->sot};
    sotto_generate_opts o = sotto_generate_default_opts();
    tok_log log = {{0}, 0};
    o.on_token = on_token;
    o.user = &log;
    sotto_generate_result g, b1, b5;
    CHECK(sotto_generate(m, ws, st, prompt, 1, &o, &g, &err) == 0);
    CHECK(g.n_tokens > 0 && g.n_tokens <= 224);
    CHECK_EQ_INT(log.n, g.n_tokens);
    CHECK(log.n == g.n_tokens && memcmp(log.t, g.tokens, sizeof(int32_t) * g.n_tokens) == 0);
    CHECK(isfinite(g.avg_logprob) && g.avg_logprob <= 0);
    CHECK(g.no_speech_prob >= 0 && g.no_speech_prob <= 1);
    int ok = 1, last_ts = -1;
    for (int i = 0; i < g.n_tokens; i++) {
        ok &= g.tokens[i] != sp->eot && g.tokens[i] < sotto_model_hparams(m)->n_vocab;
        if (g.tokens[i] >= sp->timestamp_begin) {
            ok &= g.tokens[i] >= last_ts;
            last_ts = g.tokens[i];
        }
    }
    CHECK_MSG(ok, "greedy output breaks the timestamp rules");
    CHECK(g.tokens[0] >= sp->timestamp_begin); /* starts with a timestamp */
    o.on_token = NULL;
    o.beam_size = 1;
    CHECK(sotto_generate(m, ws, st, prompt, 1, &o, &b1, &err) == 0);
    CHECK(b1.n_tokens == g.n_tokens && memcmp(b1.tokens, g.tokens, sizeof(int32_t) * g.n_tokens) == 0);
    o.beam_size = 5;
    CHECK(sotto_generate(m, ws, st, prompt, 1, &o, &b5, &err) == 0);
    CHECK(b5.n_tokens > 0 && isfinite(b5.score));
    /* length limit */
    sotto_generate_result lim;
    o.beam_size = 1;
    o.max_new_tokens = 3;
    CHECK(sotto_generate(m, ws, st, prompt, 1, &o, &lim, &err) == 0);
    CHECK(lim.n_tokens <= 2); /* min(total / 2, total - 0) with total = 1 + 3 */
    /* seeded sampling is reproducible */
    sotto_generate_result s1, s2;
    o.max_new_tokens = 0;
    o.temperature = 0.8f;
    o.best_of = 3;
    o.seed = 42;
    CHECK(sotto_generate(m, ws, st, prompt, 1, &o, &s1, &err) == 0);
    CHECK(sotto_generate(m, ws, st, prompt, 1, &o, &s2, &err) == 0);
    CHECK(s1.n_tokens == s2.n_tokens &&
          memcmp(s1.tokens, s2.tokens, sizeof(int32_t) * (size_t)s1.n_tokens) == 0);
    /* bad options */
    sotto_generate_result bad;
    o.beam_size = 2;
    CHECK(sotto_generate(m, ws, st, prompt, 1, &o, &bad, &err) == SOTTO_E_INVALID);
    o = sotto_generate_default_opts();
    o.beam_size = 6; /* the state holds 5 */
    CHECK(sotto_generate(m, ws, st, prompt, 1, &o, &bad, &err) == SOTTO_E_INVALID);
    int32_t no_sot[2] = {100, 200};
    o.beam_size = 1;
    CHECK(sotto_generate(m, ws, st, no_sot, 2, &o, &bad, &err) == SOTTO_E_INVALID);
    sotto_generate_result_free(&g);
    sotto_generate_result_free(&b1);
    sotto_generate_result_free(&b5);
    sotto_generate_result_free(&lim);
    sotto_generate_result_free(&s1);
    sotto_generate_result_free(&s2);
    sotto_state_free(st);
    sotto_workspace_free(ws);
}

/* A forced prefix over 30 s of digital silence: greedy decoding ends right
 * after it (nothing more is said), and with begin_after_prefix the first
 * token after it is neither the blank nor <|endoftext|>. */
static void test_begin_after_prefix(const sotto_model *m) {
    const sotto_special_tokens *sp = sotto_model_special(m);
    sotto_err err;
    float *audio = calloc(SOTTO_N_SAMPLES, sizeof(float));
    float *win = audio ? window_of(m, audio, SOTTO_N_SAMPLES) : NULL;
    free(audio);
    CHECK(win != NULL);
    if (!win) return;
    const sotto_tokenizer *tok = sotto_model_tokenizer(m);
    int32_t prefix[16], prompt[64];
    size_t np = 0;
    const char *text = " The meeting is over.";
    CHECK(sotto_tokenizer_encode(tok, text, strlen(text), prefix, 16, &np, NULL) == 0 && np > 0);
    sotto_prompt_spec ps = {.lang_token = -1, .task_token = -1, .prefix = prefix, .n_prefix = (int)np,
                            .min_room = 16};
    int n_prompt = sotto_prompt_build(m, &ps, prompt, 64);
    CHECK(n_prompt > (int)np);
    sotto_suppression sup;
    CHECK(sotto_suppression_init(&sup, m, 1, 1, &err) == 0);
    sotto_generate_opts o = sotto_generate_default_opts();
    sotto_suppression_apply(&sup, &o);
    const int32_t space = sotto_tokenizer_token_id(tok, "\xc4\xa0");
    sotto_workspace *ws = sotto_workspace_create();
    sotto_state *st[2] = {sotto_state_create(m, 1, &err), sotto_state_create(m, 1, &err)};
    const float *mels[2] = {win, win};
    CHECK(st[0] && st[1] && sotto_encode_batch(m, ws, st, mels, 2, &err) == 0);
    sotto_gen_job jobs[2];
    memset(jobs, 0, sizeof jobs);
    for (int i = 0; i < 2; i++) {
        jobs[i].st = st[i];
        jobs[i].prompt = prompt;
        jobs[i].n_prompt = n_prompt;
        jobs[i].max_new_tokens = 16;
        jobs[i].begin_after_prefix = i; /* the same window, without and with */
    }
    CHECK(n_prompt > 0 && sotto_generate_greedy_batch(m, ws, jobs, 2, &o, &err) == 0);
    CHECK_MSG(jobs[0].status == 0 && jobs[0].res.n_tokens == 0,
              "without begin_after_prefix the silent window should end after the prefix (%d tokens)",
              jobs[0].res.n_tokens);
    CHECK_MSG(jobs[1].status == 0 && jobs[1].res.n_tokens >= 1 && jobs[1].res.tokens[0] != sp->eot &&
                  jobs[1].res.tokens[0] != space,
              "with begin_after_prefix: %d tokens, the first %d (blank %d, eot %d)", jobs[1].res.n_tokens,
              jobs[1].res.n_tokens ? jobs[1].res.tokens[0] : -1, space, sp->eot);
    for (int i = 0; i < 2; i++) {
        sotto_generate_result_free(&jobs[i].res);
        sotto_state_free(st[i]);
    }
    sotto_workspace_free(ws);
    sotto_suppression_free(&sup);
    free(win);
}

int main(void) {
    const char *src = getenv("SOTTO_SOURCE_DIR");
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/models/tiny.en", src ? src : ".");
    sotto_err err;
    sotto_model_params p = sotto_model_default_params();
    sotto_threads_set(2);
    sotto_model *m = sotto_model_load(dir, &p, &err);
    CHECK_MSG(m != NULL, "cannot load %s (run scripts/fetch_models.sh): %s", dir, err.msg);
    test_rules();
    if (m) {
        float *win = synthetic_window(m);
        test_decoder_consistency(m, win);
        test_threads(m, win);
        test_encode_batch(m, win);
        test_encode_ctx(m, win);
        test_generate(m, win);
        test_begin_after_prefix(m);
        free(win);
        sotto_model_free(m);
    }
    return check_report();
}
