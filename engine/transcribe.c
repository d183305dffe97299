/* transcribe.c - the long-form transcription loop (see transcribe.h). */
#include "transcribe.h"

#include "log.h"
#include "model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

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

float sotto_compression_ratio(const char *text, size_t len) {
    if (len == 0) return 0.0f;
    uLongf cap = compressBound((uLong)len);
    Bytef *buf = malloc(cap);
    if (!buf) return 0.0f;
    float r = 0.0f;
    if (compress2(buf, &cap, (const Bytef *)text, (uLong)len, Z_DEFAULT_COMPRESSION) == Z_OK)
        r = (float)len / (float)cap;
    free(buf);
    return r;
}

/* ---- small vectors ------------------------------------------------------- */

typedef struct ivec {
    int32_t *v;
    int n, cap;
} ivec;

static int ivec_push(ivec *a, const int32_t *x, int n) {
    if (a->n + n > a->cap) {
        int cap = a->cap ? a->cap : 256;
        while (cap < a->n + n) cap *= 2;
        int32_t *nv = realloc(a->v, sizeof(int32_t) * (size_t)cap);
        if (!nv) return SOTTO_E_NOMEM;
        a->v = nv;
        a->cap = cap;
    }
    memcpy(a->v + a->n, x, sizeof(int32_t) * (size_t)n);
    a->n += n;
    return SOTTO_OK;
}

/* Python's str.strip() for UTF-8: bounds of s without leading/trailing
 * Unicode whitespace. */
static size_t utf8_space_len(const unsigned char *s, size_t n) {
    if (n >= 1 && (s[0] == ' ' || (s[0] >= 0x09 && s[0] <= 0x0d) || (s[0] >= 0x1c && s[0] <= 0x1f)))
        return 1;
    if (n >= 2 && s[0] == 0xc2 && (s[1] == 0x85 || s[1] == 0xa0)) return 2;
    if (n >= 3 && s[0] == 0xe1 && s[1] == 0x9a && s[2] == 0x80) return 3; /* U+1680 */
    if (n >= 3 && s[0] == 0xe2 && s[1] == 0x80 &&
        ((s[2] >= 0x80 && s[2] <= 0x8a) || s[2] == 0xa8 || s[2] == 0xa9 || s[2] == 0xaf))
        return 3;
    if (n >= 3 && s[0] == 0xe2 && s[1] == 0x81 && s[2] == 0x9f) return 3; /* U+205F */
    if (n >= 3 && s[0] == 0xe3 && s[1] == 0x80 && s[2] == 0x80) return 3; /* U+3000 */
    return 0;
}

static void strip_bounds(const char *text, size_t *b, size_t *e) {
    const unsigned char *s = (const unsigned char *)text;
    size_t n = strlen(text), i = 0, k;
    while (i < n && (k = utf8_space_len(s + i, n - i))) i += k;
    size_t j = n;
    while (j > i) { /* step back one code point and test it */
        size_t p = j - 1;
        while (p > i && (s[p] & 0xc0) == 0x80) p--;
        if (utf8_space_len(s + p, j - p) != j - p) break;
        j = p;
    }
    *b = i;
    *e = j;
}

/* ---- suppression lists ------------------------------------------------- */

static int add_unique(ivec *a, int32_t t) {
    if (t < 0) return SOTTO_OK;
    for (int i = 0; i < a->n; i++)
        if (a->v[i] == t) return SOTTO_OK;
    return ivec_push(a, &t, 1);
}

static int cmp_i32(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

int sotto_non_speech_tokens(const sotto_model *m, int32_t **out, int *n, sotto_err *err) {
    const sotto_tokenizer *tok = sotto_model_tokenizer(m);
    ivec r = {0};
    int rc = SOTTO_OK;
    *out = NULL;
    *n = 0;
    if (!sotto_tokenizer_can_encode(tok)) { /* fall back to the checkpoint's list */
        int nd;
        const int32_t *d = sotto_model_default_suppress(m, &nd);
        for (int i = 0; i < nd && rc == 0; i++) rc = add_unique(&r, d[i]);
        goto done;
    }
    static const char *const symbols[] = {
        "\"", "#", "(", ")", "*", "+", "/", ":", ";", "<", "=", ">", "@", "[", "\\", "]", "^",
        "_", "`", "{", "|", "}", "~", "\xe3\x80\x8c", "\xe3\x80\x8d", "\xe3\x80\x8e",
        "\xe3\x80\x8f", "<<", ">>", "<<<", ">>>", "--", "---", "-(", "-[", "('", "(\"", "((",
        "))", "(((", ")))", "[[", "]]", "{{", "}}", "\xe2\x99\xaa\xe2\x99\xaa",
        "\xe2\x99\xaa\xe2\x99\xaa\xe2\x99\xaa"};
    static const char *const misc[] = {"\xe2\x99\xa9", "\xe2\x99\xaa", "\xe2\x99\xab",
                                       "\xe2\x99\xac", "\xe2\x99\xad", "\xe2\x99\xae",
                                       "\xe2\x99\xaf"};
    int32_t ids[64];
    size_t cnt;
    const char *lead[] = {" -", " '"};
    for (int i = 0; i < 2 && rc == 0; i++) {
        rc = sotto_tokenizer_encode(tok, lead[i], strlen(lead[i]), ids, 64, &cnt, err);
        if (rc == 0 && cnt > 0) rc = add_unique(&r, ids[0]);
    }
    const int n_sym = (int)(sizeof symbols / sizeof symbols[0]);
    const int n_misc = (int)(sizeof misc / sizeof misc[0]);
    for (int i = 0; i < n_sym + n_misc && rc == 0; i++) {
        int is_misc = i >= n_sym;
        const char *s = is_misc ? misc[i - n_sym] : symbols[i];
        char spaced[32];
        snprintf(spaced, sizeof spaced, " %s", s);
        const char *forms[2] = {s, spaced};
        for (int f = 0; f < 2 && rc == 0; f++) {
            rc = sotto_tokenizer_encode(tok, forms[f], strlen(forms[f]), ids, 64, &cnt, err);
            if (rc == 0 && cnt > 0 && (cnt == 1 || is_misc)) rc = add_unique(&r, ids[0]);
        }
    }
done:
    if (rc) {
        free(r.v);
        return rc;
    }
    qsort(r.v, (size_t)r.n, sizeof(int32_t), cmp_i32);
    *out = r.v;
    *n = r.n;
    return SOTTO_OK;
}

/* ---- the loop ------------------------------------------------------------ */

typedef struct run {
    const sotto_model *m;
    const sotto_transcribe_opts *o;
    const sotto_special_tokens *sp;
    sotto_workspace *ws;
    sotto_state *st;
    ivec suppress, suppress_begin;
    int32_t lang_token, task_token;
    sotto_transcript *out;
    int seg_cap;
} run;

typedef struct attempt {
    sotto_generate_result res;
    float temperature, compression_ratio;
} attempt;

static int decode_text(const run *R, const int32_t *tokens, int n, char **text, sotto_err *err) {
    /* tokens >= eot (specials, timestamps) produce no text */
    int32_t *t = malloc(sizeof(int32_t) * (size_t)(n ? n : 1));
    if (!t) return sotto_err_set(err, SOTTO_E_NOMEM, "out of memory");
    int k = 0;
    for (int i = 0; i < n; i++)
        if (tokens[i] < R->sp->eot) t[k++] = tokens[i];
    *text = sotto_tokenizer_decode(sotto_model_tokenizer(R->m), t, (size_t)k, err);
    free(t);
    return *text ? SOTTO_OK : (err ? err->code : SOTTO_E_NOMEM);
}

static int generate_with_fallback(run *R, const int32_t *prompt, int n_prompt, attempt *best,
                                  sotto_err *err) {
    const sotto_transcribe_opts *o = R->o;
    attempt tries[SOTTO_MAX_TEMPERATURES];
    int n_tries = 0, chosen = -1, rc = SOTTO_OK;
    int n_temps = o->n_temperatures > 0 ? o->n_temperatures : 1;
    for (int ti = 0; ti < n_temps; ti++) {
        float T = o->n_temperatures > 0 ? o->temperatures[ti] : 0.0f;
        sotto_generate_opts g = sotto_generate_default_opts();
        g.temperature = T;
        g.beam_size = T > 0.0f ? 1 : o->beam_size;
        g.best_of = T > 0.0f ? o->best_of : 1;
        g.patience = o->patience;
        g.length_penalty = o->length_penalty;
        g.max_new_tokens = o->max_new_tokens;
        g.suppress = R->suppress.v;
        g.n_suppress = R->suppress.n;
        g.suppress_begin = R->suppress_begin.v;
        g.n_suppress_begin = R->suppress_begin.n;
        g.max_initial_timestamp = o->max_initial_timestamp;
        g.seed = o->seed + (uint64_t)ti * 7919u;
        attempt *a = &tries[n_tries];
        memset(a, 0, sizeof *a);
        if ((rc = sotto_generate(R->m, R->ws, R->st, prompt, n_prompt, &g, &a->res, err))) break;
        n_tries++;
        a->temperature = T;
        char *text = NULL;
        if ((rc = decode_text(R, a->res.tokens, a->res.n_tokens, &text, err))) break;
        size_t b, e;
        strip_bounds(text, &b, &e);
        a->compression_ratio = sotto_compression_ratio(text + b, e - b);
        free(text);
        int fallback = 0;
        float avg = a->res.avg_logprob;
        if (o->compression_ratio_threshold > 0 && a->compression_ratio > o->compression_ratio_threshold)
            fallback = 1;
        if (!isnan(o->log_prob_threshold) && avg < o->log_prob_threshold) fallback = 1;
        if (!isnan(o->no_speech_threshold) && a->res.no_speech_prob > o->no_speech_threshold &&
            !isnan(o->log_prob_threshold) && avg < o->log_prob_threshold)
            fallback = 0; /* silence */
        if (!fallback) {
            chosen = n_tries - 1;
            break;
        }
        SOTTO_DEBUG("temperature %.1f failed (compression %.2f, avg logprob %.3f)", T,
                    a->compression_ratio, avg);
    }
    if (rc == SOTTO_OK && chosen < 0) {
        /* all failed: the best average log-prob among those that passed the
         * compression test (or among all), reported with the last temperature */
        int any_ok = 0;
        for (int i = 0; i < n_tries; i++)
            any_ok |= !(o->compression_ratio_threshold > 0 &&
                        tries[i].compression_ratio > o->compression_ratio_threshold);
        for (int i = 0; i < n_tries; i++) {
            int ok = !(o->compression_ratio_threshold > 0 &&
                       tries[i].compression_ratio > o->compression_ratio_threshold);
            if (any_ok && !ok) continue;
            if (chosen < 0 || tries[i].res.avg_logprob > tries[chosen].res.avg_logprob) chosen = i;
        }
        if (chosen >= 0) tries[chosen].temperature = tries[n_tries - 1].temperature;
    }
    for (int i = 0; i < n_tries; i++) {
        if (i == chosen && rc == SOTTO_OK)
            *best = tries[i];
        else
            sotto_generate_result_free(&tries[i].res);
    }
    if (rc == SOTTO_OK && chosen < 0)
        rc = sotto_err_set(err, SOTTO_E_INTERNAL, "no decoding attempt was made");
    return rc;
}

static int build_prompt(const run *R, const ivec *all, int reset_since, int first_window,
                        ivec *prompt, sotto_err *err) {
    const sotto_transcribe_opts *o = R->o;
    const sotto_special_tokens *sp = R->sp;
    const int half = sotto_model_hparams(R->m)->n_text_ctx / 2;
    int rc = SOTTO_OK;
    prompt->n = 0;
    int n_prev = all->n - reset_since;
    if (n_prev > 0) {
        rc |= ivec_push(prompt, &sp->sot_prev, 1);
        int take = n_prev < half - 1 ? n_prev : half - 1;
        rc |= ivec_push(prompt, all->v + all->n - take, take);
    }
    rc |= ivec_push(prompt, &sp->sot, 1);
    if (R->lang_token >= 0) rc |= ivec_push(prompt, &R->lang_token, 1);
    if (R->task_token >= 0) rc |= ivec_push(prompt, &R->task_token, 1);
    if (o->without_timestamps) rc |= ivec_push(prompt, &sp->no_timestamps, 1);
    if (rc) return sotto_err_set(err, SOTTO_E_NOMEM, "out of memory");
    if (first_window && o->prefix && *o->prefix) {
        size_t b, e;
        strip_bounds(o->prefix, &b, &e);
        size_t len = e - b + 1;
        char *text = malloc(len + 1);
        int32_t *ids = malloc(sizeof(int32_t) * (len + 8));
        size_t cnt = 0;
        if (!text || !ids) rc = sotto_err_set(err, SOTTO_E_NOMEM, "out of memory");
        if (rc == 0) {
            text[0] = ' ';
            memcpy(text + 1, o->prefix + b, e - b);
            text[len] = '\0';
            rc = sotto_tokenizer_encode(sotto_model_tokenizer(R->m), text, len, ids, len + 8, &cnt,
                                        err);
        }
        if (rc == 0) {
            if ((int)cnt >= half) cnt = (size_t)(half - 1);
            if (!o->without_timestamps) rc |= ivec_push(prompt, &sp->timestamp_begin, 1);
            rc |= ivec_push(prompt, ids, (int)cnt);
            if (rc) rc = sotto_err_set(err, SOTTO_E_NOMEM, "out of memory");
        }
        free(text);
        free(ids);
    }
    return rc;
}

static int emit_segment(run *R, double start, double end, const int32_t *tokens, int n,
                        const attempt *a, ivec *all, int *stop, sotto_err *err) {
    char *text = NULL;
    int rc = decode_text(R, tokens, n, &text, err);
    if (rc) return rc;
    size_t b, e;
    strip_bounds(text, &b, &e);
    if (start == end || e == b) {
        free(text);
        return SOTTO_OK;
    }
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
    s->compression_ratio = a->compression_ratio;
    t->n_segments++;
    if (R->o->on_segment && R->o->on_segment(R->o->user, s)) *stop = 1;
    return SOTTO_OK;
}

/* Splits one window's tokens at timestamp pairs into segments and returns
 * the new seek position (Whisper's seeking rule). */
static int split_and_emit(run *R, const attempt *a, int seek, int segment_size, ivec *all,
                          int *new_seek, int *stop, sotto_err *err) {
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

static int setup_tokens(run *R, sotto_err *err) {
    const sotto_transcribe_opts *o = R->o;
    const sotto_special_tokens *sp = R->sp;
    int rc = SOTTO_OK;
    if (o->suppress_non_speech) {
        int32_t *ns;
        int n;
        if ((rc = sotto_non_speech_tokens(R->m, &ns, &n, err))) return rc;
        rc = ivec_push(&R->suppress, ns, n);
        free(ns);
        if (rc) return sotto_err_set(err, rc, "out of memory");
    }
    const int32_t specials[] = {sp->transcribe, sp->translate, sp->sot,
                                sp->sot_prev,   sp->sot_lm,    sp->no_speech};
    for (size_t i = 0; i < sizeof specials / sizeof specials[0] && rc == 0; i++)
        rc = add_unique(&R->suppress, specials[i]);
    if (o->suppress_blank) {
        int32_t space = sotto_tokenizer_token_id(sotto_model_tokenizer(R->m), "\xc4\xa0");
        if (rc == 0 && space >= 0) rc = add_unique(&R->suppress_begin, space);
        if (rc == 0) rc = add_unique(&R->suppress_begin, sp->eot);
    }
    if (rc) return sotto_err_set(err, rc, "out of memory");
    qsort(R->suppress.v, (size_t)R->suppress.n, sizeof(int32_t), cmp_i32);
    return SOTTO_OK;
}

/* Zero-padded 3000-frame window of features starting at frame `seek`. */
static void take_window(const float *mel, int n_mels, size_t n_frames, int seek, int size,
                        float *win) {
    for (int c = 0; c < n_mels; c++) {
        float *dst = win + (size_t)c * SOTTO_N_FRAMES;
        memcpy(dst, mel + (size_t)c * n_frames + seek, sizeof(float) * (size_t)size);
        memset(dst + size, 0, sizeof(float) * (size_t)(SOTTO_N_FRAMES - size));
    }
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
    float *mel = NULL, *win = NULL;
    ivec all = {0}, prompt = {0};
    int rc = SOTTO_OK;
    out->duration = (double)n / SOTTO_SAMPLE_RATE;
    if (o->n_temperatures < 0 || o->n_temperatures > SOTTO_MAX_TEMPERATURES)
        return sotto_err_set(err, SOTTO_E_INVALID, "bad temperature count %d", o->n_temperatures);
    int max_seqs = o->beam_size > o->best_of ? o->beam_size : o->best_of;
    R.ws = sotto_workspace_create();
    R.st = sotto_state_create(m, max_seqs < 1 ? 1 : max_seqs, err);
    win = malloc(sizeof(float) * (size_t)hp->n_mels * SOTTO_N_FRAMES);
    if (!R.ws || !R.st || !win) {
        rc = err && err->code ? err->code : sotto_err_set(err, SOTTO_E_NOMEM, "out of memory");
        goto done;
    }
    if ((rc = setup_tokens(&R, err))) goto done;

    size_t n_frames;
    if ((rc = sotto_mel_compute(sotto_model_mel(m), samples, n, SOTTO_HOP, 0, &mel, &n_frames,
                                err)))
        goto done;
    const int content_frames = (int)n_frames - 1;

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
            take_window(mel, hp->n_mels, n_frames, 0, size, win);
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

    if (o->initial_prompt && *o->initial_prompt) {
        size_t b, e;
        strip_bounds(o->initial_prompt, &b, &e);
        size_t len = e - b + 1;
        char *text = malloc(len + 1);
        int32_t *ids = malloc(sizeof(int32_t) * (len + 8));
        size_t cnt = 0;
        if (!text || !ids) rc = sotto_err_set(err, SOTTO_E_NOMEM, "out of memory");
        if (rc == 0) {
            text[0] = ' ';
            memcpy(text + 1, o->initial_prompt + b, e - b);
            text[len] = '\0';
            rc = sotto_tokenizer_encode(sotto_model_tokenizer(m), text, len, ids, len + 8, &cnt,
                                        err);
        }
        if (rc == 0 && ivec_push(&all, ids, (int)cnt))
            rc = sotto_err_set(err, SOTTO_E_NOMEM, "out of memory");
        free(text);
        free(ids);
        if (rc) goto done;
    }

    int seek = 0, reset_since = 0, stop = 0;
    while (seek < content_frames && !stop) {
        int segment_size = content_frames - seek < SOTTO_N_FRAMES ? content_frames - seek
                                                                  : SOTTO_N_FRAMES;
        take_window(mel, hp->n_mels, n_frames, seek, segment_size, win);
        if ((rc = sotto_encode(m, R.ws, R.st, win, err))) goto done;
        if ((rc = build_prompt(&R, &all, reset_since, seek == 0, &prompt, err))) goto done;
        attempt a;
        memset(&a, 0, sizeof a);
        if ((rc = generate_with_fallback(&R, prompt.v, prompt.n, &a, err))) goto done;
        int skip = 0;
        if (!isnan(o->no_speech_threshold)) {
            skip = a.res.no_speech_prob > o->no_speech_threshold;
            if (!isnan(o->log_prob_threshold) && a.res.avg_logprob > o->log_prob_threshold) skip = 0;
        }
        int new_seek = seek + segment_size;
        if (!skip) rc = split_and_emit(&R, &a, seek, segment_size, &all, &new_seek, &stop, err);
        sotto_generate_result_free(&a.res);
        if (rc) goto done;
        if (!skip && (!o->condition_on_previous_text ||
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
    free(all.v);
    free(prompt.v);
    free(R.suppress.v);
    free(R.suppress_begin.v);
    sotto_state_free(R.st);
    sotto_workspace_free(R.ws);
    return rc;
}
