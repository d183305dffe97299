/* worker.c - the inference worker and the model loader.
 *
 * The worker runs the decode passes that sessions' dictations ask for.
 * Each turn takes one batch as include/scheduler.h chooses it: final passes
 * before partial ones, and of that kind the oldest due pass and the other
 * due passes of its weight variant, oldest first;
 * their encoder passes run as one batch and their decoder steps together
 * (sotto_generate_greedy_batch). It also applies the overload policy
 * (every session's step stretched while passes wait too long; new sessions
 * refused while that is not enough). Never touches sockets.
 *
 * The loader loads the variants that starting sessions ask for, so that a
 * load never pauses the sessions being served; the worker initializes a
 * session once its variant is in memory. */
#define _POSIX_C_SOURCE 200809L
#include "server.h"

#include "decoding.h"
#include "generate.h"
#include "log.h"
#include "threads.h"
#include "transcribe.h"

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_BATCH 16
#define LANG_LOCK_S 4.0 /* audio in a window before its detected language is final */
#define MAX_PROMPT 448

static void emit_cb(void *user, const sotto_event *ev) {
    srv_session *ss = user; /* called with the session lock held */
    srv_session_emit_event_locked(ss->srv, ss, ev);
}

/* Prompt tokens for the session's initial prompt (context of the first
 * window). */
static void encode_prompt(const sotto_model *m, srv_session *ss) {
    if (!ss->prompt || !*ss->prompt) return;
    const sotto_tokenizer *tok = sotto_model_tokenizer(m);
    if (!sotto_tokenizer_can_encode(tok)) return;
    size_t len = strlen(ss->prompt);
    char *text = malloc(len + 2);
    int32_t *ids = malloc(sizeof(int32_t) * (len + 8));
    size_t n = 0;
    if (text && ids) {
        text[0] = ' ';
        memcpy(text + 1, ss->prompt, len + 1);
        if (sotto_tokenizer_encode(tok, text, len + 1, ids, len + 8, &n, NULL) == 0) {
            ss->prompt_tokens = ids;
            ss->n_prompt_tokens = (int)n;
            ids = NULL;
        }
    }
    free(text);
    free(ids);
}

static void init_session(srv *s, srv_session *ss) {
    sotto_err err;
    sotto_err_clear(&err);
    if (srv_model_acquire(s, ss->sm, &err)) {
        srv_session_error(s, ss, "model_unavailable", err.msg, 1);
        pthread_mutex_lock(&ss->lock);
        ss->state = SESS_DONE;
        pthread_mutex_unlock(&ss->lock);
        return;
    }
    const sotto_model *m = ss->sm->model;
    int multilingual = sotto_model_is_multilingual(m);
    if (!multilingual) {
        snprintf(ss->language, sizeof ss->language, "en");
    } else if (ss->language[0] && strcmp(ss->language, "auto") != 0) {
        int li = sotto_language_index(m, ss->language);
        if (li < 0) {
            srv_session_error(s, ss, "bad_start", "unknown language", 1);
            pthread_mutex_lock(&ss->lock);
            ss->state = SESS_DONE;
            pthread_mutex_unlock(&ss->lock);
            return;
        }
        sotto_language_code(m, li, ss->language, sizeof ss->language);
        ss->language_detected = 1;
    } else {
        snprintf(ss->language, sizeof ss->language, "auto");
    }
    encode_prompt(m, ss);
    pthread_mutex_lock(&ss->lock);
    ss->dict = sotto_dictation_create(&ss->dp, sotto_model_tokenizer(m), sotto_model_special(m)->eot,
                                      emit_cb, ss, &err);
    if (!ss->dict) {
        pthread_mutex_unlock(&ss->lock);
        srv_session_error(s, ss, "internal", err.msg, 1);
        return;
    }
    sotto_dictation_set_context(ss->dict, ss->prompt_tokens, ss->n_prompt_tokens);
    sotto_dictation_set_timestamps(ss->dict, sotto_model_special(m)->timestamp_begin);
    if (ss->restore) { /* continues a session from its checkpoint (checkpoint.c) */
        sotto_dictation_restore(ss->dict, ss->restore_at, ss->restore_utterance);
        if (ss->n_restore_ctx) sotto_dictation_set_context(ss->dict, ss->restore_ctx, ss->n_restore_ctx);
        if (ss->n_restore_committed)
            sotto_dictation_restore_committed(ss->dict, ss->restore_committed, ss->n_restore_committed,
                                              ss->restore_bound);
    }
    /* a session restored from its checkpoint said `resumed` instead: its client has had its
       `ready` (a second one would tell it to send its audio from the start) */
    cJSON *e = ss->restore ? NULL : cJSON_CreateObject();
    if (e) {
        cJSON_AddStringToObject(e, "type", "ready");
        cJSON_AddStringToObject(e, "session", ss->id_str);
        cJSON_AddStringToObject(e, "token", ss->token);
        cJSON_AddStringToObject(e, "instance", s->opt.instance);
        cJSON_AddStringToObject(e, "model", ss->sm->name);
        cJSON_AddStringToObject(e, "weights", sotto_wfmt_name(ss->sm->weights));
        cJSON_AddNumberToObject(e, "weights_bytes", (double)ss->sm->bytes);
        cJSON_AddStringToObject(e, "policy", ss->sm->policy);
        cJSON_AddStringToObject(e, "language", ss->language);
        cJSON_AddStringToObject(e, "task", ss->task == SOTTO_TASK_TRANSLATE ? "translate" : "transcribe");
        cJSON_AddStringToObject(e, "encoding", sotto_encoding_name(ss->encoding));
        cJSON_AddNumberToObject(e, "sample_rate", ss->sample_rate);
        cJSON_AddNumberToObject(e, "channels", ss->channels);
        cJSON_AddBoolToObject(e, "partials", ss->dp.partials);
        cJSON_AddBoolToObject(e, "final_timestamps", ss->dp.final_timestamps);
        if (ss->feed[0]) cJSON_AddStringToObject(e, "feed", ss->feed);
        cJSON_AddNumberToObject(e, "step_ms", ss->dp.step_ms);
        cJSON_AddNumberToObject(e, "max_window_s", ss->dp.max_window_s);
        cJSON *v = cJSON_AddObjectToObject(e, "vad");
        int silero = ss->dp.vad.kind == SOTTO_VAD_SILERO;
        cJSON_AddStringToObject(v, "kind", silero ? "silero" : "energy");
        if (silero) cJSON_AddNumberToObject(v, "threshold", ss->dp.vad.speech_threshold);
        else cJSON_AddNumberToObject(v, "threshold_db", ss->dp.vad.threshold_db);
        cJSON_AddNumberToObject(v, "silence_ms", ss->dp.vad.silence_ms);
        cJSON_AddNumberToObject(v, "preroll_ms", ss->dp.vad.preroll_ms);
        cJSON_AddNumberToObject(v, "min_speech_ms", ss->dp.vad.min_speech_ms);
        cJSON_AddNumberToObject(v, "start_gate_db", ss->dp.vad.start_gate_db);
        cJSON_AddNumberToObject(v, "end_gate_db", ss->dp.vad.end_gate_db);
        srv_session_emit_locked(s, ss, e);
    }
    if (ss->n_pending) srv_session_push_locked(s, ss, ss->pending, ss->n_pending);
    free(ss->pending);
    ss->pending = NULL;
    ss->n_pending = ss->cap_pending = 0;
    if (ss->flush_pending) { /* in the order the client sent it: after that audio */
        sotto_dictation_flush(ss->dict, 0);
        ss->flush_pending = 0;
    }
    if (ss->state == SESS_STOPPING)
        sotto_dictation_flush(ss->dict, 1);
    else
        ss->state = SESS_RUNNING;
    srv_checkpoint_maybe_locked(s, ss, 1); /* from now on a resume may land on any instance */
    pthread_mutex_unlock(&ss->lock);
    sotto_log(SOTTO_LOG_INFO, ss->id, "ready: %s (%s), %.1f MB", ss->sm->name,
              sotto_wfmt_name(ss->sm->weights), ss->sm->bytes / 1e6);
}

/* ---- passes ------------------------------------------------------------------------ */

typedef struct job_ctx {
    srv *s;
    srv_session *ss;
    const sotto_pass *pass;
    double due_since;
    int dropped; /* abandoned before its decoder: its utterance ended meanwhile */
    int encoded;
    int final; /* pass->final, kept: once dropped, *pass is the session's next pass */
    int seen_token;
    int max_tokens;   /* the guardrails' bound on text tokens (prefix included) */
    int n_text;       /* text tokens so far (prefix included) */
    int n_gen;
    int32_t eot;
    int32_t prompt[MAX_PROMPT + 8];
    int n_prompt;
    int32_t gen[MAX_PROMPT];
    float *win;
    int beam; /* a final decoded by beam search in a beam state (--final-beam) */
    int beam_rc;
    sotto_window_result beam_res;
} job_ctx;

/* Each generated token: a partial event, and the guardrails' early stop (a
 * loop at the end of the text, or more words than the audio can hold), so
 * that a looping pass costs a few tokens, not 200. */
static int on_token(void *user, int32_t token, float logprob) {
    job_ctx *c = user;
    (void)logprob;
    if (!c->seen_token) {
        c->seen_token = 1;
        srv_hist_add(&c->s->m.first_token, srv_now() - c->due_since);
    }
    if (c->n_gen < MAX_PROMPT) c->gen[c->n_gen++] = token;
    if (token < c->eot) c->n_text++;
    if ((c->max_tokens > 0 && c->n_text > c->max_tokens) ||
        (token < c->eot && sotto_repetition_tail(c->gen, c->n_gen, c->eot))) {
        return 1;
    }
    pthread_mutex_lock(&c->ss->lock);
    sotto_dictation_on_token(c->ss->dict, c->pass->id, token);
    pthread_mutex_unlock(&c->ss->lock);
    return 0;
}

static int build_prompt(const sotto_model *m, srv_session *ss, job_ctx *c) {
    const sotto_special_tokens *sp = sotto_model_special(m);
    const sotto_pass *p = c->pass;
    sotto_prompt_spec ps = {.context = p->context, .n_context = p->n_context,
                            .lang_token = -1, .task_token = -1, .timestamps = p->timestamps,
                            .prefix = p->prefix, .n_prefix = p->n_prefix,
                            .min_room = 128 /* tokens left to generate */};
    if (sotto_model_is_multilingual(m)) {
        int li = sotto_language_index(m, ss->language);
        ps.lang_token = sp->lang_begin + (li >= 0 ? li : 0);
        ps.task_token = ss->task == SOTTO_TASK_TRANSLATE ? sp->translate : sp->transcribe;
    }
    c->n_prompt = sotto_prompt_build(m, &ps, c->prompt, MAX_PROMPT + 8);
    return c->n_prompt;
}

/* The pass window as features: log-mel of its audio, padded to 30 s. */
static int window_features(const sotto_model *m, const sotto_pass *p, float *win, sotto_err *err) {
    float *mel = NULL;
    size_t nf = 0;
    int rc = sotto_mel_compute(sotto_model_mel(m), p->samples, p->n, SOTTO_HOP, 0, &mel, &nf, err);
    if (rc) return rc;
    sotto_window_pad(mel, sotto_model_hparams(m)->n_mels, nf, 0, nf > 0 ? (int)(nf - 1) : 0, win);
    free(mel);
    return SOTTO_OK;
}

/* Text tokens among the pass's forced prefix. */
static int prefix_text(const sotto_pass *p, int32_t eot) {
    int k = 0;
    for (int i = 0; i < p->n_prefix; i++) k += p->prefix[i] < eot;
    return k;
}

/* The options of a streaming pass: greedy at temperature 0 (the batch),
 * then, for a final pass that fails the guardrails, Whisper's temperature
 * fallback with one sampled hypothesis per temperature (the pass state
 * holds one sequence). */
static sotto_window_opts stream_window_opts(const srv_model *sm) {
    sotto_window_opts w;
    memset(&w, 0, sizeof w);
    w.gen = sotto_generate_default_opts();
    sotto_suppression_apply(&sm->sup, &w.gen);
    w.beam_size = 1;
    w.best_of = 1;
    w.n_temperatures = 6;
    for (int i = 0; i < 6; i++) w.temperatures[i] = 0.2f * (float)i;
    w.guard = sotto_guard_default_opts();
    return w;
}

/* A final pass's options with --final-beam N > 1: beam N at temperature 0,
 * then the fallback of greedy finals (one sampled hypothesis per temperature:
 * with best_of N, the likeliest of N samples in pink noise at 5 dB was a copy
 * of the context, docs/PERF.md), with the token bound of that fallback. As in
 * the greedy batch (generate.h), a window whose
 * text is already committed in its forced prefix may end at once: the
 * suppress_begin list (blank, <|endoftext|>) applies only without a prefix or
 * after a prefix that is the previous utterance's text alone. */
static sotto_window_opts beam_window_opts(const sotto_window_opts *wo, int beam, const job_ctx *c,
                                          int prior) {
    sotto_window_opts o = *wo;
    o.beam_size = beam;
    if (c->max_tokens > 0) o.gen.max_new_tokens = (c->max_tokens - prior) * 3 / 2 + 8;
    if (c->pass->n_prefix > 0 && !c->pass->lead_only) o.gen.n_suppress_begin = 0;
    return o;
}

/* A beam state of `level`'s pool for a final of this batch (slot k), created on
 * first use; NULL when the pool is used up or the state cannot be made (the
 * final then decodes greedily). */
static sotto_state *beam_state(srv *s, srv_model *sm, int level, int k) {
    if (s->opt.final_beam <= 1 || level < 0 || level > 2 || k >= SRV_BEAM_STATES) return NULL;
    sotto_state **st = &sm->beam_states[level][k];
    if (!*st) {
        sotto_err err;
        *st = sotto_state_create(sm->model, s->opt.final_beam, &err);
        if (!*st) SOTTO_WARN("no beam state for a final (greedy instead): %s", err.msg);
    }
    return *st;
}

/* A stopping session whose last pass is done: `done`, then close. Session lock held. */
static void finish_if_done_locked(srv *s, srv_session *ss) {
    if (ss->state != SESS_STOPPING || !ss->dict || !sotto_dictation_done(ss->dict)) return;
    sotto_dictation_stats st;
    sotto_dictation_get_stats(ss->dict, &st);
    cJSON *e = cJSON_CreateObject();
    if (e) {
        cJSON_AddStringToObject(e, "type", "done");
        cJSON_AddNumberToObject(e, "audio_seconds", st.samples_in / 16000.0);
        cJSON_AddNumberToObject(e, "dropped_seconds", st.samples_dropped / 16000.0);
        srv_session_emit_locked(s, ss, e);
    }
    ss->state = SESS_DONE;
    ss->closing = 1;
    srv_checkpoint_maybe_locked(s, ss, 1); /* a resume elsewhere finds it finished */
}

/* Passes in a row that the engine may fail for a session (out of memory on
 * the GPU, say) before the session ends with a fatal engine_failed error
 * instead of waiting for passes that never run. */
#define ENGINE_RETRIES 3

/* Called without ss->lock: one more failed pass, or (ok) a pass that ran. */
static void engine_result(srv *s, srv_session *ss, int ok, const char *why) {
    pthread_mutex_lock(&ss->lock);
    int n = ok ? (ss->engine_failures = 0) : ++ss->engine_failures;
    pthread_mutex_unlock(&ss->lock);
    if (n == ENGINE_RETRIES) {
        char msg[sizeof(((sotto_err *)0)->msg) + 64];
        snprintf(msg, sizeof msg, "the engine failed %d passes in a row: %s", n, why);
        srv_session_error(s, ss, "engine_failed", msg, 1);
    }
}

/* Due sessions of one scan (the worker's own; grown as needed). */
typedef struct due_list {
    srv_session **ss;
    sotto_sched_cand *c;
    double *late; /* how late each pass is (its wait, or the lag of merged steps) */
    int n, cap;
} due_list;

/* The worker thread's own state. */
typedef struct worker {
    srv *s;
    sotto_workspace *ws;
    sotto_load load; /* the overload policy */
    const void *last_variant;
    int max_batch;
    due_list due;
} worker;

static double run_due_finals(worker *w, const srv_model *running, int state_base, int min_level);

/* A session of the running batch whose pass will not run in it: free for
 * run_due_finals' scan (its reference stays with the batch). */
static void let_go(srv *s, srv_session *ss) {
    pthread_mutex_lock(&s->lock);
    ss->worker_busy = 0;
    pthread_mutex_unlock(&s->lock);
}

/* Drops the batch's partial passes whose utterance ended since they were
 * taken (encoded or not: a final replaces their text at once), so that
 * their finals can run now. */
static void drop_superseded(srv *s, job_ctx *ctx, int nc) {
    for (int k = 0; k < nc; k++) {
        job_ctx *c = &ctx[k];
        if (c->dropped) continue;
        pthread_mutex_lock(&c->ss->lock);
        c->dropped = sotto_dictation_final_behind_partial(c->ss->dict);
        if (c->dropped) sotto_dictation_abandon_pass(c->ss->dict, c->pass->id);
        pthread_mutex_unlock(&c->ss->lock);
        if (!c->dropped) continue;
        atomic_fetch_add(&s->m.partials_superseded, 1);
        sotto_log(SOTTO_LOG_DEBUG, c->ss->id, "partial pass %llu dropped: its utterance ended",
                  (unsigned long long)c->pass->id);
        let_go(s, c->ss);
    }
}

/* Runs one batch of passes of variant sm in decoder states state_base.. of
 * it; level is the batch's kind as the scheduler picked it (0: partial
 * passes, 1: speculative finals, 2: finals of ended utterances). A batch
 * below level 2 encodes its windows one at a time (on the CPU a batch
 * gains little there: bench_engine's "one batch / one at a time" rows)
 * and, before each and before decoding, gives way to what is more
 * urgent: finals of a higher level that became due run first
 * (run_due_finals), and a partial pass whose utterance has ended meanwhile
 * is dropped (its final is due at once). So a final waits for at most one
 * window's encoder or a batch's decoder steps, not for a whole batch of
 * less urgent passes. */
static void run_batch(worker *w, srv_model *sm, srv_session **batch, int n, int level, int state_base) {
    srv *s = w->s;
    sotto_workspace *ws = w->ws;
    const sotto_model *m = sm->model;
    const sotto_window_opts wo = stream_window_opts(sm);
    const int nm = sotto_model_hparams(m)->n_mels;
    job_ctx ctx[MAX_BATCH];
    sotto_gen_job jobs[MAX_BATCH];
    int nj = 0;
    sotto_err err;
    /* one decoder state per batch slot, kept with the model */
    const int want = state_base + n;
    if (sm->n_states < want) {
        sotto_state **ns = realloc(sm->states, sizeof *ns * (size_t)want);
        if (!ns) sotto_err_set(&err, SOTTO_E_NOMEM, "out of memory for decoder states");
        if (ns) {
            sm->states = ns;
            while (sm->n_states < want && (ns[sm->n_states] = sotto_state_create(m, 1, &err)))
                sm->n_states++;
        }
        /* sessions without a state this round: a failed pass each */
        for (int i = sm->n_states - state_base < 0 ? 0 : sm->n_states - state_base; i < n; i++) {
            SOTTO_WARN("no decoder state for a session: %s", err.msg);
            engine_result(s, batch[i], 0, err.msg);
        }
    }
    const int slots = sm->n_states - state_base; /* < n after a failed growth */
    double t_enc = srv_now();
    /* 1: take each session's pass and compute its window's features */
    int nc = 0;
    for (int i = 0; i < n && nc < slots; i++) {
        srv_session *ss = batch[i];
        job_ctx *c = &ctx[nc];
        memset(c, 0, offsetof(job_ctx, prompt));
        c->s = s;
        c->ss = ss;
        pthread_mutex_lock(&ss->lock);
        if (sotto_dictation_final_due(ss->dict) > level) {
            /* its utterance ended since the scan: not in a less urgent batch, its
               final runs before this batch's first window (run_due_finals) */
            pthread_mutex_unlock(&ss->lock);
            let_go(s, ss);
            continue;
        }
        c->due_since = ss->pass_due_since;
        c->pass = sotto_dictation_take_pass(ss->dict);
        ss->pass_due_since = 0; /* the next pass's wait starts when it becomes due */
        pthread_mutex_unlock(&ss->lock);
        if (!c->pass) continue;
        c->final = c->pass->final;
        srv_hist_add(&s->m.pass_queue, srv_now() - c->due_since);
        c->win = malloc(sizeof(float) * (size_t)nm * SOTTO_N_FRAMES);
        int rc = c->win ? window_features(m, c->pass, c->win, &err) : SOTTO_E_NOMEM;
        if (rc) {
            sotto_log(SOTTO_LOG_WARN, ss->id, "pass failed: %s", err.msg);
            free(c->win);
            pthread_mutex_lock(&ss->lock);
            sotto_dictation_abandon_pass(ss->dict, c->pass->id);
            pthread_mutex_unlock(&ss->lock);
            continue;
        }
        nc++;
    }
    /* 2: one batched encoder pass over all windows (the weights are read once) */
    sotto_state *sts[MAX_BATCH];
    const float *mels[MAX_BATCH];
    int n_ctx[MAX_BATCH];
    const int mode = s->opt.audio_ctx;
    const size_t pad = (size_t)(s->opt.audio_ctx_pad_ms * 16.0);
    const size_t fpad = (size_t)(s->opt.final_ctx_pad_ms * 16.0);
    const int full = sotto_model_hparams(m)->n_audio_ctx;
    /* a final pass over a short utterance needs more than its audio (docs/PERF.md) */
    const size_t ffloor = (size_t)(s->opt.final_ctx_min_ms * 16.0);
    /* finals decode by beam search (--final-beam) unless the server is behind */
    const int beam_ok = s->opt.final_beam > 1 && !(w->load.scale > 1.0);
    int n_beam = 0;
    for (int i = 0; i < nc; i++) {
        const sotto_pass *p = ctx[i].pass;
        sts[i] = sm->states[state_base + i], mels[i] = ctx[i].win;
        sotto_state *bst = beam_ok && p->final ? beam_state(s, sm, level, n_beam) : NULL;
        ctx[i].beam = bst != NULL; /* ctx[] is not zeroed past its prompt */
        if (bst) {
            sts[i] = bst;
            n_beam++;
        }
        /* --audio-ctx: a cut window costs in proportion to its audio */
        if (mode == SRV_AUDIO_CTX_FULL || (mode == SRV_AUDIO_CTX_PARTIALS && p->final))
            n_ctx[i] = full;
        else if (!p->final)
            n_ctx[i] = sotto_encoder_positions(m, p->n, pad);
        else /* a final pass: its audio plus fpad, at least the floor */
            n_ctx[i] = sotto_encoder_positions(m, p->n + fpad > ffloor ? p->n + fpad : ffloor, 0);
    }
    int erc = SOTTO_OK;
    double t_between = 0.0; /* finals run between the windows (not this batch's time) */
    if (level >= 2) { /* finals of ended utterances: one call (nothing is more urgent) */
        if (nc) erc = sotto_encode_batch_ctx(m, ws, sts, mels, n_ctx, nc, &err);
        for (int i = 0; i < nc && !erc; i++) ctx[i].encoded = 1;
    } else {
        for (int i = 0; i <= nc && !erc; i++) {
            drop_superseded(s, ctx, nc);
            t_between += run_due_finals(w, sm, state_base + nc, level + 1);
            if (i < nc && !ctx[i].dropped) {
                erc = sotto_encode_batch_ctx(m, ws, &sts[i], &mels[i], &n_ctx[i], 1, &err);
                ctx[i].encoded = !erc;
            }
        }
    }
    if (!erc)
        for (int i = 0; i < nc; i++) {
            if (!ctx[i].encoded) continue;
            const uint64_t pos = (uint64_t)sotto_state_encoded_positions(sts[i]);
            atomic_fetch_add(&s->m.encoded_windows, 1);
            atomic_fetch_add(&s->m.encoded_positions, pos);
            if (ctx[i].final) {
                atomic_fetch_add(&s->m.final_windows, 1);
                atomic_fetch_add(&s->m.final_positions, pos);
            }
        }
    if (erc) {
        SOTTO_WARN("encoder batch of %d failed: %s", nc, err.msg);
        for (int i = 0; i < nc; i++)
            if (!ctx[i].dropped) engine_result(s, ctx[i].ss, 0, err.msg);
    }
    /* 3: language detection where needed, prompts, decoding jobs */
    for (int i = 0; i < nc; i++) {
        job_ctx *c = &ctx[i];
        srv_session *ss = c->ss;
        sotto_state *st = sts[i];
        free(c->win);
        c->win = NULL;
        if (c->dropped) continue; /* abandoned above */
        if (erc) {
            pthread_mutex_lock(&ss->lock);
            sotto_dictation_abandon_pass(ss->dict, c->pass->id);
            pthread_mutex_unlock(&ss->lock);
            continue;
        }
        if (!ss->language_detected && sotto_model_is_multilingual(m)) {
            float probs[128];
            int best = 0;
            if (sotto_detect_language(m, ws, st, probs, &best, &err) == 0) {
                /* a second of speech is too little to tell languages apart: until the
                   window holds LANG_LOCK_S (or this is its final pass), each pass
                   detects again and the language is not announced */
                int lock = c->pass->final || c->pass->n >= (size_t)(LANG_LOCK_S * 16000);
                pthread_mutex_lock(&ss->lock);
                sotto_language_code(m, best, ss->language, sizeof ss->language);
                ss->language_detected = lock;
                cJSON *e = lock ? cJSON_CreateObject() : NULL;
                if (e) {
                    cJSON_AddStringToObject(e, "type", "language");
                    cJSON_AddStringToObject(e, "language", ss->language);
                    cJSON_AddNumberToObject(e, "probability", probs[best]);
                    srv_session_emit_locked(s, ss, e);
                }
                pthread_mutex_unlock(&ss->lock);
            }
        }
        if (nj != i) ctx[nj] = *c; /* keep ctx[] and jobs[] aligned */
        c = &ctx[nj];
        if (build_prompt(m, ss, c) < 0) { /* cannot happen: windows are short */
            pthread_mutex_lock(&ss->lock);
            sotto_dictation_abandon_pass(ss->dict, c->pass->id);
            pthread_mutex_unlock(&ss->lock);
            engine_result(s, ss, 0, "the pass's prompt does not fit the decoder's context");
            continue;
        }
        c->eot = sotto_model_special(m)->eot;
        c->n_text = prefix_text(c->pass, c->eot);
        c->max_tokens = sotto_guard_max_tokens(&wo.guard, c->pass->n / 16000.0);
        sotto_gen_job *j = &jobs[nj];
        memset(j, 0, sizeof *j);
        j->st = st;
        j->prompt = c->prompt;
        j->n_prompt = c->n_prompt;
        j->on_token = on_token;
        j->user = c;
        /* a prefix of only the previous utterance's text: this window's speech
           must give at least one token (suppress_begin), as Whisper's first
           sampled token after a prefix */
        j->begin_after_prefix = c->pass->lead_only;
        nj++;
    }
    /* beam-searched finals after the greedy jobs (one greedy batch call) */
    int ng = 0;
    for (int i = 0; i < nj; i++)
        if (!ctx[i].beam) {
            if (i != ng) {
                job_ctx tc = ctx[ng];
                sotto_gen_job tj = jobs[ng];
                ctx[ng] = ctx[i], jobs[ng] = jobs[i];
                ctx[i] = tc, jobs[i] = tj;
            }
            ng++;
        }
    for (int i = 0; i < nj; i++) jobs[i].user = &ctx[i]; /* moved */
    double t_dec = srv_now();
    t_enc += t_between; /* the partials waited for those finals; their encoder did not run */
    if (nc) srv_hist_add(&s->m.encode, (t_dec - t_enc) / nc);
    int brc = ng ? sotto_generate_greedy_batch(m, ws, jobs, ng, &wo.gen, &err) : SOTTO_OK;
    for (int i = ng; i < nj; i++) {
        job_ctx *c = &ctx[i];
        const int prior = prefix_text(c->pass, c->eot);
        sotto_window_opts bo = beam_window_opts(&wo, s->opt.final_beam, c, prior);
        sotto_err berr;
        memset(&c->beam_res, 0, sizeof c->beam_res);
        c->beam_rc = sotto_window_decode(m, ws, jobs[i].st, c->prompt, c->n_prompt, &bo,
                                         c->pass->n / 16000.0, prior, 0, NULL, &c->beam_res, &berr);
        if (c->beam_rc) sotto_log(SOTTO_LOG_WARN, c->ss->id, "beam final failed: %s", berr.msg);
        else atomic_fetch_add(&s->m.beam_finals, 1);
        jobs[i].res = c->beam_res.res;
    }
    const double t_done = srv_now();
    if (nj) srv_hist_add(&s->m.decode, t_done - t_dec);
    int n_final = 0;
    for (int i = 0; i < nj; i++) n_final += ctx[i].pass->final;
    for (int i = 0; i < nj; i++) {
        job_ctx *c = &ctx[i];
        srv_session *ss = c->ss;
        sotto_generate_result *r = &jobs[i].res;
        int failed = c->beam ? c->beam_rc != SOTTO_OK : brc || jobs[i].status;
        sotto_verdict v;
        memset(&v, 0, sizeof v);
        const double secs = c->pass->n / 16000.0;
        const int prior = prefix_text(c->pass, c->eot);
        sotto_window_result fb;
        memset(&fb, 0, sizeof fb);
        int used_fallback = 0;
        if (c->beam) { /* the offline loop chose already (fallback included) */
            fb = c->beam_res;
            v = fb.v;
            v.failed = 0; /* cut by the loop if every attempt failed */
            used_fallback = fb.temperature > 0.0f || fb.all_failed;
            if (used_fallback) atomic_fetch_add(&s->m.fallback_passes, 1);
        } else if (!failed && sotto_guard_check(m, &wo.guard, r, secs, prior, &v, &err)) {
            failed = 1;
        }
        /* a final pass that fails the guardrails: Whisper's temperature fallback */
        const double t_fb = srv_now();
        if (!failed && c->pass->final && v.failed) {
            atomic_fetch_add(&s->m.fallback_passes, 1);
            /* sampled attempts stop at the token bound (timestamps allowed for) */
            sotto_window_opts fo = wo;
            if (c->max_tokens > 0) fo.gen.max_new_tokens = (c->max_tokens - prior) * 3 / 2 + 8;
            /* the greedy hypothesis takes part in the choice (cut, if all fail) */
            sotto_window_result greedy = {.res = *r, .temperature = 0.0f, .v = v};
            unsigned was = (unsigned)v.failed;
            float was_lp = r->avg_logprob;
            memset(r, 0, sizeof *r);
            if (sotto_window_decode(m, ws, jobs[i].st, c->prompt, c->n_prompt, &fo, secs, prior, 1,
                                    &greedy, &fb, &err) == SOTTO_OK) {
                sotto_log(SOTTO_LOG_INFO, ss->id,
                          "final pass %llu failed the guardrails (0x%x, compression %.2f, "
                          "logprob %.2f); fallback to temperature %.1f%s",
                          (unsigned long long)c->pass->id, was, v.compression_ratio, was_lp,
                          fb.temperature, fb.all_failed ? ", every attempt failed" : "");
                *r = fb.res;
                v = fb.v;
                v.failed = 0; /* fb.res is what the fallback chose (cut if all failed) */
                used_fallback = 1;
            } else {
                sotto_log(SOTTO_LOG_WARN, ss->id, "fallback failed: %s", err.msg);
                failed = 1;
            }
        }
        engine_result(s, ss, !failed, brc ? err.msg : "the decoder failed");
        /* where a pass's time went (the tail of final latency, docs/PERF.md) */
        sotto_log(SOTTO_LOG_DEBUG, ss->id,
                  "%s pass %llu: %.1f s audio, waited %.3f s, batch of %d (%d final), encode %.3f s, "
                  "decode %.3f s, fallback %.3f s, %d tokens; %.3f s since due",
                  c->pass->final ? "final" : "partial", (unsigned long long)c->pass->id, secs,
                  t_enc - c->due_since, nj, n_final, t_dec - t_enc, t_done - t_dec,
                  used_fallback ? srv_now() - t_fb : 0.0, r->n_tokens, srv_now() - c->due_since);
        pthread_mutex_lock(&ss->lock);
        if (failed) {
            sotto_dictation_abandon_pass(ss->dict, c->pass->id);
        } else if (!v.silent && v.failed) { /* a partial pass that failed: withdrawn */
            sotto_log(SOTTO_LOG_DEBUG, ss->id, "partial pass %llu rejected (0x%x)",
                      (unsigned long long)c->pass->id, (unsigned)v.failed);
            atomic_fetch_add(&s->m.rejected_passes, 1);
            sotto_dictation_reject_pass(ss->dict, c->pass->id);
        } else {
            /* nothing was said (Whisper's no-speech rule): commit nothing */
            int silent = v.silent || (used_fallback && sotto_guard_is_silent(&wo.guard, r));
            sotto_dictation_complete_pass_flags(ss->dict, c->pass->id, r->tokens,
                                                silent ? 0 : r->n_tokens,
                                                (used_fallback ? SOTTO_PASS_RESET_CONTEXT : 0) |
                                                    (used_fallback && fb.all_failed ? SOTTO_PASS_ALL_FAILED : 0));
            atomic_fetch_add(&s->m.passes, 1);
            srv_hist_add(&s->m.pass_total, srv_now() - c->due_since);
        }
        /* a backlog (or the next final) makes the next pass due as this one ends */
        if (ss->pass_due_since == 0 && sotto_dictation_pass_due(ss->dict)) ss->pass_due_since = srv_now();
        sotto_dictation_stats st;
        srv_session_count_locked(s, ss, &st);
        srv_checkpoint_maybe_locked(s, ss, 0); /* after a final */
        finish_if_done_locked(s, ss);
        pthread_mutex_unlock(&ss->lock);
        sotto_generate_result_free(r);
    }
    if (brc) SOTTO_WARN("decode batch failed: %s", err.msg);
}

/* A stopping session whose dictation is already done (nothing to decode). */
static void finish_if_done(srv *s, srv_session *ss) {
    pthread_mutex_lock(&ss->lock);
    finish_if_done_locked(s, ss);
    pthread_mutex_unlock(&ss->lock);
}

/* The overload policy's state, for /metrics, the log and admission. */
static void publish_load(srv *s, const sotto_load *l) {
    atomic_store(&s->m.step_scale_pm, (int)(l->scale * 1000 + 0.5));
    atomic_store(&s->m.step_grows, l->grows);
    atomic_store(&s->m.admission_closes, l->closes);
    atomic_store(&s->overloaded, !l->admit);
    SOTTO_INFO("overload policy: step x%.2f, new sessions %s (longest wait %.2f s, worker busy %.0f%%)",
               l->scale, l->admit ? "admitted" : "refused", l->last_wait, l->last_busy_share * 100);
}

static int due_push(due_list *d, srv_session *ss, double due_since, int final, double late) {
    if (d->n == d->cap) {
        int cap = d->cap ? d->cap * 2 : 64;
        srv_session **a = realloc(d->ss, sizeof *a * (size_t)cap);
        if (a) d->ss = a;
        sotto_sched_cand *c = a ? realloc(d->c, sizeof *c * (size_t)cap) : NULL;
        if (c) d->c = c;
        double *l = c ? realloc(d->late, sizeof *l * (size_t)cap) : NULL;
        if (l) d->late = l;
        if (!a || !c || !l) return -1; /* this scan goes without it; the next one retries */
        d->cap = cap;
    }
    d->ss[d->n] = ss;
    d->c[d->n] = (sotto_sched_cand){ss->sm, due_since, final};
    d->late[d->n] = late;
    d->n++;
    return 0;
}

/* What one look at the sessions found to do. */
typedef struct work {
    srv_session *init[MAX_BATCH], *batch[MAX_BATCH], *finish[MAX_BATCH];
    int n_init, n_batch, n_finish;
    srv_model *bm; /* the batch's variant */
    int level;     /* the batch's kind: 0 partial, 1 speculative finals, 2 finals */
} work;

/* One look at the sessions (srv->lock held): sessions to initialize and to
 * finish, and the next batch as the scheduler picks it (with min_level > 0,
 * only final passes of that level or more, sotto_dictation_final_due;
 * nothing else is collected then). Every session taken has a reference
 * and, for init and batch, worker_busy set. */
static void scan(worker *w, int min_level, work *k) {
    srv *s = w->s;
    double now = srv_now();
    k->n_init = k->n_batch = k->n_finish = 0;
    k->bm = NULL;
    w->due.n = 0;
    for (srv_session *ss = s->sessions; ss; ss = ss->next) {
        if (ss->fatal || ss->worker_busy) continue;
        pthread_mutex_lock(&ss->lock);
        /* a session is initialized once the loader has its variant (sm->model: srv->lock) */
        int needs_init = !ss->dict && ss->sm && ss->sm->model &&
                         (ss->state == SESS_LOADING || ss->state == SESS_STOPPING);
        if (ss->dict) { /* the overload policy's step */
            int want = sotto_load_step_ms(&w->load, ss->dp.step_ms, 10000);
            if (sotto_dictation_step_ms(ss->dict) != want) sotto_dictation_set_step_ms(ss->dict, want);
        }
        int due = ss->dict && sotto_dictation_pass_due(ss->dict);
        int final = due ? sotto_dictation_final_due(ss->dict) : 0;
        int done = ss->dict && ss->state == SESS_STOPPING && sotto_dictation_done(ss->dict);
        if (due && ss->pass_due_since == 0) ss->pass_due_since = now;
        if (!due) ss->pass_due_since = 0;
        double due_since = ss->pass_due_since;
        /* how late the pass is: its wait, or the lag merged steps hide (scheduler.h) */
        double late = due ? now - due_since : 0.0;
        if (due) {
            double lag = sotto_sched_merged_lag(sotto_dictation_pending_samples(ss->dict) / 16000.0,
                                                sotto_dictation_step_ms(ss->dict) / 1000.0,
                                                ss->pace.pace);
            if (lag > late) late = lag;
        }
        pthread_mutex_unlock(&ss->lock);
        if (min_level > 0) {
            if (final >= min_level) due_push(&w->due, ss, due_since, final, late);
        } else if (needs_init && k->n_init < MAX_BATCH) {
            ss->refs++;
            ss->worker_busy = 1;
            k->init[k->n_init++] = ss;
        } else if (due) {
            due_push(&w->due, ss, due_since, final, late);
        } else if (done && k->n_finish < MAX_BATCH) {
            ss->refs++;
            k->finish[k->n_finish++] = ss;
        }
    }
    /* the batch: finals first; the oldest due pass's variant, its oldest passes (scheduler.h) */
    int pick[MAX_BATCH];
    k->n_batch = sotto_sched_pick(w->due.c, w->due.n, w->max_batch, w->last_variant, pick);
    for (int i = 0; i < k->n_batch; i++) {
        srv_session *ss = w->due.ss[pick[i]];
        ss->refs++;
        ss->worker_busy = 1;
        k->batch[i] = ss;
    }
    k->level = 0;
    if (k->n_batch) {
        k->level = w->due.c[pick[0]].final;
        k->bm = k->batch[0]->sm;
        w->last_variant = k->bm;
        double late = 0.0; /* the latest pass of the batch decides */
        for (int i = 0; i < k->n_batch; i++)
            if (w->due.late[pick[i]] > late) late = w->due.late[pick[i]];
        if (sotto_load_on_batch(&w->load, late, now)) publish_load(s, &w->load);
    }
}

/* After a batch (srv->lock not held): the sessions taken are free again,
 * and the service thread looks at them (their events, a finish). */
static void release(srv *s, srv_session **ss, int n, int busy) {
    if (!n) return;
    if (busy) {
        pthread_mutex_lock(&s->lock);
        for (int i = 0; i < n; i++) ss[i]->worker_busy = 0;
        pthread_mutex_unlock(&s->lock);
    }
    for (int i = 0; i < n; i++) srv_session_wake(s, ss[i]), srv_session_unref(s, ss[i]);
}

/* Final passes of min_level or more that became due while a less urgent
 * batch of variant `running` is being encoded: they run now, ahead of the
 * rest of it, in decoder states from state_base on (those of a batch of the
 * same variant come before). Returns the seconds they took. */
static double run_due_finals(worker *w, const srv_model *running, int state_base, int min_level) {
    srv *s = w->s;
    work k;
    pthread_mutex_lock(&s->lock);
    scan(w, min_level, &k);
    pthread_mutex_unlock(&s->lock);
    if (!k.n_batch) return 0.0;
    const double t0 = srv_now();
    atomic_fetch_add(&s->m.finals_between, (uint64_t)k.n_batch);
    run_batch(w, k.bm, k.batch, k.n_batch, k.level, k.bm == running ? state_base : 0);
    release(s, k.batch, k.n_batch, 1);
    return srv_now() - t0;
}

static void *worker_main(void *arg) {
    srv *s = arg;
    sotto_threads_set(s->opt.threads);
    worker w = {.s = s, .ws = sotto_workspace_create()};
    sotto_err err;
    if (s->n_models && srv_model_acquire(s, &s->models[0], &err) == 0) {
        atomic_store(&s->ready, 1);
    } else {
        SOTTO_ERROR("cannot load the default model: %s", err.msg);
        atomic_store(&s->stop, 1);
        if (s->ctx) srv_wake(s);
    }
    w.max_batch = s->opt.max_batch < MAX_BATCH ? s->opt.max_batch : MAX_BATCH;
    sotto_load_init(&w.load, &s->load_params);
    atomic_store(&s->m.step_scale_pm, 1000);
    pthread_mutex_lock(&s->lock);
    while (!atomic_load(&s->stop)) {
        work k;
        scan(&w, 0, &k);
        if (!k.n_init && !k.n_batch && !k.n_finish) {
            if (sotto_load_on_idle(&w.load, srv_now())) publish_load(s, &w.load);
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_sec += 1;
            int rc = pthread_cond_timedwait(&s->work, &s->lock, &ts);
            if (rc == ETIMEDOUT) { /* housekeeping once a second */
                pthread_mutex_unlock(&s->lock);
                srv_models_unload_idle(s);
                srv_wake(s);
                pthread_mutex_lock(&s->lock);
            }
            continue;
        }
        pthread_mutex_unlock(&s->lock);
        double t0 = srv_now();
        for (int i = 0; i < k.n_init; i++) init_session(s, k.init[i]);
        if (k.n_batch) run_batch(&w, k.bm, k.batch, k.n_batch, k.level, 0);
        for (int i = 0; i < k.n_finish; i++) finish_if_done(s, k.finish[i]);
        sotto_load_busy(&w.load, srv_now() - t0);
        release(s, k.init, k.n_init, 1);
        release(s, k.batch, k.n_batch, 1);
        release(s, k.finish, k.n_finish, 0);
        pthread_mutex_lock(&s->lock);
    }
    pthread_mutex_unlock(&s->lock);
    free(w.due.ss);
    free(w.due.c);
    free(w.due.late);
    sotto_workspace_free(w.ws);
    return NULL;
}

/* ---- the model loader ------------------------------------------------------------- */

/* A session waiting for a variant that is not loaded (srv->lock held). */
static int waits_for_load(srv_session *ss) {
    if (ss->fatal || !ss->sm || ss->sm->model) return 0;
    pthread_mutex_lock(&ss->lock);
    int w = !ss->dict && (ss->state == SESS_LOADING || ss->state == SESS_STOPPING);
    pthread_mutex_unlock(&ss->lock);
    return w;
}

/* Loads the variants that starting sessions need, one at a time, off the
 * worker: sessions already running keep being served meanwhile. A failed
 * load ends the sessions waiting for it with `model_unavailable`. */
static void *loader_main(void *arg) {
    srv *s = arg;
    pthread_mutex_lock(&s->lock);
    while (!atomic_load(&s->stop)) {
        srv_model *want = NULL;
        for (srv_session *ss = s->sessions; ss && !want; ss = ss->next)
            if (waits_for_load(ss) && !ss->sm->loading) want = ss->sm;
        if (!want) {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_sec += 1;
            pthread_cond_timedwait(&s->load_cv, &s->lock, &ts);
            continue;
        }
        pthread_mutex_unlock(&s->lock);
        sotto_err err;
        sotto_err_clear(&err);
        int rc = srv_model_acquire(s, want, &err);
        pthread_mutex_lock(&s->lock);
        if (rc) {
            srv_session *failed[64];
            int n = 0;
            for (srv_session *ss = s->sessions; ss && n < 64; ss = ss->next)
                if (ss->sm == want && waits_for_load(ss)) {
                    ss->refs++;
                    failed[n++] = ss;
                }
            pthread_mutex_unlock(&s->lock);
            for (int i = 0; i < n; i++) {
                srv_session_error(s, failed[i], "model_unavailable", err.msg, 1);
                pthread_mutex_lock(&failed[i]->lock);
                failed[i]->state = SESS_DONE;
                pthread_mutex_unlock(&failed[i]->lock);
                srv_session_unref(s, failed[i]);
            }
            srv_wake(s);
            pthread_mutex_lock(&s->lock);
        }
        pthread_cond_signal(&s->work); /* its sessions can be initialized */
    }
    pthread_mutex_unlock(&s->lock);
    return NULL;
}

int srv_admission_check(srv *s, srv_session *ss) {
    if (!atomic_load(&s->overloaded)) return 1;
    atomic_fetch_add(&s->m.sessions_refused_overload, 1);
    atomic_fetch_add(&s->m.sessions_rejected, 1);
    srv_session_error(s, ss, "overloaded",
                      "the server is behind on the sessions it has (passes wait longer than "
                      "--overload-wait-ms at the longest step); try again later",
                      1);
    return 0;
}

void srv_worker_kick(srv *s) {
    pthread_mutex_lock(&s->lock);
    pthread_cond_signal(&s->work);
    pthread_mutex_unlock(&s->lock);
}

void srv_loader_kick(srv *s) {
    pthread_mutex_lock(&s->lock);
    pthread_cond_signal(&s->load_cv);
    pthread_cond_signal(&s->work);
    pthread_mutex_unlock(&s->lock);
}

int srv_worker_start(srv *s) {
    if (pthread_create(&s->worker, NULL, worker_main, s) != 0) return -1;
    s->worker_started = 1;
    if (pthread_create(&s->loader, NULL, loader_main, s) != 0) {
        srv_worker_stop(s);
        return -1;
    }
    s->loader_started = 1;
    return 0;
}

void srv_worker_stop(srv *s) {
    if (!s->worker_started) return;
    atomic_store(&s->stop, 1);
    pthread_mutex_lock(&s->lock);
    pthread_cond_broadcast(&s->work);
    pthread_cond_broadcast(&s->load_cv);
    pthread_mutex_unlock(&s->lock);
    pthread_join(s->worker, NULL);
    s->worker_started = 0;
    if (s->loader_started) pthread_join(s->loader, NULL);
    s->loader_started = 0;
}
