/* transcribe.c - the long-form transcription loop (see transcribe.h). */
#include "transcribe.h"

#include "decoding.h"
#include "ivec.h"
#include "log.h"
#include "model.h"
#include "silero.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TIME_PER_FRAME 0.01 /* hop 160 at 16 kHz */
#define TIME_PRECISION 0.02 /* one timestamp token */
#define INPUT_STRIDE 2      /* mel frames per encoder position */

sotto_transcribe_opts sotto_transcribe_default_opts(void) {
    sotto_transcribe_opts o;
    memset(&o, 0, sizeof o);
    o.task = SOTTO_TASK_TRANSCRIBE;
    o.beam_size = 5;
    o.best_of = 5;
    o.patience = 1.0f;
    o.length_penalty = 1.0f;
    for (int i = 0; i < 6; i++) o.temperatures[i] = 0.2f * (float)i;
    o.n_temperatures = 6;
    o.compression_ratio_threshold = 2.4f;
    o.log_prob_threshold = -1.0f;
    o.no_speech_threshold = 0.6f;
    o.condition_on_previous_text = 1;
    o.prompt_reset_on_temperature = 0.5f;
    o.suppress_blank = 1;
    o.suppress_non_speech = 1;
    o.max_initial_timestamp = 1.0f;
    o.seed = 0x5eed5eedULL;
    o.vad_threshold = 0.5f;
    o.vad_min_speech_ms = 250;
    return o;
}

void sotto_transcript_free(sotto_transcript *t) {
    if (!t) return;
    for (int i = 0; i < t->n_segments; i++) {
        free(t->segments[i].text);
        free(t->segments[i].tokens);
    }
    free(t->segments);
    memset(t, 0, sizeof *t);
}

/* ---- the loop ------------------------------------------------------------ */

typedef struct run {
    const sotto_model *m;
    const sotto_transcribe_opts *o;
    const sotto_special_tokens *sp;
    sotto_workspace *ws;
    sotto_state *st;
    sotto_suppression sup;
    sotto_window_opts wo;
    int32_t lang_token, task_token;
    sotto_transcript *out;
    int seg_cap;
} run;

/* Appends the tokens of " " + strip(text) to v (initial prompt, prefix). */
static int encode_text(const run *R, const char *text, ivec *v, sotto_err *err) {
    size_t b, e;
    sotto_strip_bounds(text, &b, &e);
    size_t len = e - b + 1;
    char *t = malloc(len + 1);
    int32_t *ids = malloc(sizeof(int32_t) * (len + 8));
    size_t cnt = 0;
    int rc = t && ids ? SOTTO_OK : sotto_err_set(err, SOTTO_E_NOMEM, "out of memory");
    if (rc == 0) {
        t[0] = ' ';
        memcpy(t + 1, text + b, e - b);
        t[len] = '\0';
        rc = sotto_tokenizer_encode(sotto_model_tokenizer(R->m), t, len, ids, len + 8, &cnt, err);
    }
    if (rc == 0 && ivec_push(v, ids, (int)cnt)) rc = sotto_err_set(err, SOTTO_E_NOMEM, "out of memory");
    free(t);
    free(ids);
    return rc;
}

static int emit_segment(run *R, double start, double end, const int32_t *tokens, int n,
                        const sotto_window_result *a, ivec *all, int *stop, sotto_err *err) {
    char *text = sotto_tokens_text(R->m, tokens, n, err);
    if (!text) return err && err->code ? err->code : SOTTO_E_NOMEM;
    size_t b, e;
    sotto_strip_bounds(text, &b, &e);
    if (start == end || e == b) {
        free(text);
        return SOTTO_OK;
    }
    int rc;
    if ((rc = ivec_push(all, tokens, n))) {
        free(text);
        return sotto_err_set(err, rc, "out of memory");
    }
    sotto_transcript *t = R->out;
    if (t->n_segments == R->seg_cap) {
        int cap = R->seg_cap ? R->seg_cap * 2 : 32;
        sotto_segment *ns = realloc(t->segments, sizeof *ns * (size_t)cap);
        if (!ns) {
            free(text);
            return sotto_err_set(err, SOTTO_E_NOMEM, "out of memory");
        }
        t->segments = ns;
        R->seg_cap = cap;
    }
    sotto_segment *s = &t->segments[t->n_segments];
    memset(s, 0, sizeof *s);
    s->tokens = malloc(sizeof(int32_t) * (size_t)(n ? n : 1));
    if (!s->tokens) {
        free(text);
        return sotto_err_set(err, SOTTO_E_NOMEM, "out of memory");
    }
    memcpy(s->tokens, tokens, sizeof(int32_t) * (size_t)n);
    s->n_tokens = n;
    s->text = text;
    s->start = start;
    s->end = end;
    s->avg_logprob = a->res.avg_logprob;
    s->no_speech_prob = a->res.no_speech_prob;
    s->temperature = a->temperature;
    s->compression_ratio = a->v.compression_ratio;
    t->n_segments++;
    if (R->o->on_segment && R->o->on_segment(R->o->user, s)) *stop = 1;
    return SOTTO_OK;
}

/* Splits one window's tokens at timestamp pairs into segments and returns
 * the new seek position (Whisper's seeking rule). */
static int split_and_emit(run *R, const sotto_window_result *a, int seek, int segment_size,
                          ivec *all, int *new_seek, int *stop, sotto_err *err) {
    const int32_t *tk = a->res.tokens;
    const int n = a->res.n_tokens, tb = R->sp->timestamp_begin;
    const double time_offset = seek * TIME_PER_FRAME;
    int single_end = n >= 2 && tk[n - 2] < tb && tk[n - 1] >= tb;
    int rc = SOTTO_OK;
    int any_pair = 0;
    for (int i = 1; i < n; i++) any_pair |= tk[i] >= tb && tk[i - 1] >= tb;
    if (any_pair) {
        int last = 0;
        for (int i = 1; i <= n && rc == 0 && !*stop; i++) {
            int cut = (i < n && tk[i] >= tb && tk[i - 1] >= tb) || (i == n && single_end);
            if (!cut) continue;
            const int32_t *s = tk + last;
            int len = i - last;
            double st = time_offset + (s[0] - tb) * TIME_PRECISION;
            double en = time_offset + (s[len - 1] - tb) * TIME_PRECISION;
            rc = emit_segment(R, st, en, s, len, a, all, stop, err);
            last = i;
        }
        if (single_end)
            *new_seek = seek + segment_size;
        else
            *new_seek = seek + (tk[last - 1] - tb) * INPUT_STRIDE;
    } else {
        double duration = segment_size * TIME_PER_FRAME;
        int32_t last_ts = -1;
        for (int i = 0; i < n; i++)
            if (tk[i] >= tb) last_ts = tk[i];
        if (last_ts >= 0 && last_ts != tb) duration = (last_ts - tb) * TIME_PRECISION;
        rc = emit_segment(R, time_offset, time_offset + duration, tk, n, a, all, stop, err);
        *new_seek = seek + segment_size;
    }
    return rc;
}

/* Speech probability of every 512-sample chunk of the recording. */
static int vad_probs(const sotto_silero_model *vm, const float *x, size_t n, float **out,
                     size_t *n_out, sotto_err *err) {
    size_t nc = (n + SOTTO_SILERO_CHUNK - 1) / SOTTO_SILERO_CHUNK;
    float *p = malloc(sizeof(float) * (nc ? nc : 1));
    sotto_silero *s = sotto_silero_create(vm, err);
    if (!p || !s) {
        free(p);
        sotto_silero_free(s);
        return err && err->code ? err->code : sotto_err_set(err, SOTTO_E_NOMEM, "out of memory");
    }
    float chunk[SOTTO_SILERO_CHUNK];
    for (size_t i = 0; i < nc; i++) {
        size_t off = i * SOTTO_SILERO_CHUNK, k = n - off < SOTTO_SILERO_CHUNK ? n - off : SOTTO_SILERO_CHUNK;
        memcpy(chunk, x + off, sizeof(float) * k);
        memset(chunk + k, 0, sizeof(float) * (SOTTO_SILERO_CHUNK - k));
        p[i] = sotto_silero_process(s, chunk);
    }
    sotto_silero_free(s);
    *out = p;
    *n_out = nc;
    return SOTTO_OK;
}

/* 1 if samples [s0, s1) hold at least min_ms of speech chunks. */
static int vad_has_speech(const float *p, size_t nc, size_t s0, size_t s1, float thr, int min_ms) {
    size_t c0 = s0 / SOTTO_SILERO_CHUNK, c1 = (s1 + SOTTO_SILERO_CHUNK - 1) / SOTTO_SILERO_CHUNK;
    int need = (min_ms * SOTTO_SILERO_RATE / 1000 + SOTTO_SILERO_CHUNK - 1) / SOTTO_SILERO_CHUNK, k = 0;
    if (need < 1) need = 1;
    for (size_t c = c0; c < c1 && c < nc; c++)
        if (p[c] >= thr && ++k >= need) return 1;
    return 0;
}

static void window_opts(run *R) {
    const sotto_transcribe_opts *o = R->o;
    sotto_window_opts *w = &R->wo;
    memset(w, 0, sizeof *w);
    w->gen = sotto_generate_default_opts();
    w->gen.patience = o->patience;
    w->gen.length_penalty = o->length_penalty;
    w->gen.max_new_tokens = o->max_new_tokens;
    w->gen.max_initial_timestamp = o->max_initial_timestamp;
    w->gen.seed = o->seed;
    sotto_suppression_apply(&R->sup, &w->gen);
    w->beam_size = o->beam_size;
    w->best_of = o->best_of;
    w->n_temperatures = o->n_temperatures;
    memcpy(w->temperatures, o->temperatures, sizeof w->temperatures);
    w->guard = sotto_guard_default_opts();
    w->guard.compression_ratio_threshold = o->compression_ratio_threshold;
    w->guard.log_prob_threshold = o->log_prob_threshold;
    w->guard.no_speech_threshold = o->no_speech_threshold;
    w->guard.repetition = !o->no_repetition_guard;
    w->guard.max_tokens_per_s = o->no_repetition_guard ? 0.0f : w->guard.max_tokens_per_s;
}

int sotto_transcribe(const sotto_model *m, const float *samples, size_t n,
                     const sotto_transcribe_opts *o, sotto_transcript *out, sotto_err *err) {
    memset(out, 0, sizeof *out);
    const sotto_hparams *hp = sotto_model_hparams(m);
    run R;
    memset(&R, 0, sizeof R);
    R.m = m;
    R.o = o;
    R.sp = sotto_model_special(m);
    R.out = out;
    R.lang_token = R.task_token = -1;
    float *mel = NULL, *win = NULL, *speech = NULL;
    size_t n_speech = 0;
    ivec all = {0}, prefix = {0};
    int32_t *prompt = NULL;
    int rc = SOTTO_OK;
    out->duration = (double)n / SOTTO_SAMPLE_RATE;
    if (o->n_temperatures < 0 || o->n_temperatures > SOTTO_MAX_TEMPERATURES)
        return sotto_err_set(err, SOTTO_E_INVALID, "bad temperature count %d", o->n_temperatures);
    int max_seqs = o->beam_size > o->best_of ? o->beam_size : o->best_of;
    const int prompt_cap = hp->n_text_ctx + 8;
    R.ws = sotto_workspace_create();
    R.st = sotto_state_create(m, max_seqs < 1 ? 1 : max_seqs, err);
    win = malloc(sizeof(float) * (size_t)hp->n_mels * SOTTO_N_FRAMES);
    prompt = malloc(sizeof(int32_t) * (size_t)prompt_cap);
    if (!R.ws || !R.st || !win || !prompt) {
        rc = err && err->code ? err->code : sotto_err_set(err, SOTTO_E_NOMEM, "out of memory");
        goto done;
    }
    if ((rc = sotto_suppression_init(&R.sup, m, o->suppress_non_speech, o->suppress_blank, err)))
        goto done;
    window_opts(&R);

    size_t n_frames;
    if ((rc = sotto_mel_compute(sotto_model_mel(m), samples, n, SOTTO_HOP, 0, &mel, &n_frames,
                                err)))
        goto done;
    const int content_frames = (int)n_frames - 1;
    if (o->vad && (rc = vad_probs(o->vad, samples, n, &speech, &n_speech, err))) goto done;

    /* language and task */
    const char *lang = o->language;
    if (sotto_model_is_multilingual(m)) {
        int li;
        if (!lang || !*lang || strcmp(lang, "auto") == 0) {
            float *probs = malloc(sizeof(float) * (size_t)R.sp->n_langs);
            if (!probs) {
                rc = sotto_err_set(err, SOTTO_E_NOMEM, "out of memory");
                goto done;
            }
            /* faster-whisper detects on the first 30 s of all frames */
            int size = n_frames < SOTTO_N_FRAMES ? (int)n_frames : SOTTO_N_FRAMES;
            sotto_window_pad(mel, hp->n_mels, n_frames, 0, size, win);
            rc = sotto_encode(m, R.ws, R.st, win, err);
            if (rc == 0) rc = sotto_detect_language(m, R.ws, R.st, probs, &li, err);
            if (rc == 0) out->language_prob = probs[li];
            free(probs);
            if (rc) goto done;
        } else {
            li = sotto_language_index(m, lang);
            if (li < 0) {
                rc = sotto_err_set(err, SOTTO_E_INVALID, "unknown language '%s'", lang);
                goto done;
            }
            out->language_prob = 1.0f;
        }
        sotto_language_code(m, li, out->language, sizeof out->language);
        R.lang_token = R.sp->lang_begin + li;
        R.task_token = o->task == SOTTO_TASK_TRANSLATE ? R.sp->translate : R.sp->transcribe;
    } else {
        if (lang && *lang && strcmp(lang, "auto") != 0 && sotto_language_index(m, lang) != 0)
            SOTTO_WARN("the model is English-only; ignoring language '%s'", lang);
        if (o->task == SOTTO_TASK_TRANSLATE)
            SOTTO_WARN("the model is English-only; translating is transcribing");
        strcpy(out->language, "en");
        out->language_prob = 1.0f;
    }

    if (o->initial_prompt && *o->initial_prompt && (rc = encode_text(&R, o->initial_prompt, &all, err)))
        goto done;
    if (o->prefix && *o->prefix) {
        if ((rc = encode_text(&R, o->prefix, &prefix, err))) goto done;
        if (prefix.n >= hp->n_text_ctx / 2) prefix.n = hp->n_text_ctx / 2 - 1;
    }

    int seek = 0, reset_since = 0, stop = 0;
    while (seek < content_frames && !stop) {
        int segment_size = content_frames - seek < SOTTO_N_FRAMES ? content_frames - seek
                                                                  : SOTTO_N_FRAMES;
        /* a window of digital silence is not decoded: Whisper invents
           "you" there */
        size_t s0 = (size_t)seek * SOTTO_HOP, s1 = s0 + (size_t)segment_size * SOTTO_HOP;
        if (s1 > n) s1 = n;
        if (s0 < s1 && (sotto_audio_is_silent(samples + s0, s1 - s0) ||
                        (speech && !vad_has_speech(speech, n_speech, s0, s1, o->vad_threshold,
                                                   o->vad_min_speech_ms)))) {
            /* the next window overlaps this one by 2 s, so speech that only
               begins at its end is decoded whole */
            int last = seek + segment_size >= content_frames;
            seek += last || segment_size <= 400 ? segment_size : segment_size - 200;
            continue;
        }
        sotto_window_pad(mel, hp->n_mels, n_frames, (size_t)seek, segment_size, win);
        if ((rc = sotto_encode(m, R.ws, R.st, win, err))) goto done;
        sotto_prompt_spec ps = {
            .context = all.v + reset_since, .n_context = all.n - reset_since,
            .lang_token = R.lang_token, .task_token = R.task_token,
            .timestamps = !o->without_timestamps,
            .prefix = seek == 0 ? prefix.v : NULL, .n_prefix = seek == 0 ? prefix.n : 0,
            .prefix_timestamp = !o->without_timestamps};
        int np = sotto_prompt_build(m, &ps, prompt, prompt_cap);
        if (np < 0) {
            rc = sotto_err_set(err, SOTTO_E_INTERNAL, "prompt longer than the decoder's context");
            goto done;
        }
        sotto_window_result a;
        if ((rc = sotto_window_decode(m, R.ws, R.st, prompt, np, &R.wo, segment_size * TIME_PER_FRAME,
                                      0, 0, NULL, &a, err)))
            goto done;
        int skip = sotto_guard_is_silent(&R.wo.guard, &a.res);
        int new_seek = seek + segment_size;
        if (!skip) rc = split_and_emit(&R, &a, seek, segment_size, &all, &new_seek, &stop, err);
        sotto_generate_result_free(&a.res);
        if (rc) goto done;
        /* the prompt is dropped after a window that needed a high temperature
           (faster-whisper's rule) or whose every attempt failed: a loop must
           not be fed to the next window */
        if (!skip && (!o->condition_on_previous_text || a.all_failed ||
                      a.temperature > o->prompt_reset_on_temperature))
            reset_since = all.n;
        if (new_seek <= seek) new_seek = seek + 1; /* never loop in place */
        seek = new_seek;
        if (o->on_progress)
            o->on_progress(o->user, (seek < content_frames ? seek : content_frames) * TIME_PER_FRAME,
                           content_frames * TIME_PER_FRAME);
    }
done:
    if (rc) sotto_transcript_free(out);
    free(mel);
    free(win);
    free(speech);
    free(all.v);
    free(prefix.v);
    free(prompt);
    sotto_suppression_free(&R.sup);
    sotto_state_free(R.st);
    sotto_workspace_free(R.ws);
    return rc;
}
