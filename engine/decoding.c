/* decoding.c - the decoding policy of one window (see decoding.h). */
#include "decoding.h"

#include "ivec.h"
#include "log.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

/* ---- text ------------------------------------------------------------------ */

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

void sotto_strip_bounds(const char *text, size_t *b, size_t *e) {
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

char *sotto_tokens_text(const sotto_model *m, const int32_t *tokens, int n, sotto_err *err) {
    const int32_t eot = sotto_model_special(m)->eot;
    int32_t *t = malloc(sizeof(int32_t) * (size_t)(n > 0 ? n : 1));
    if (!t) {
        sotto_err_set(err, SOTTO_E_NOMEM, "out of memory");
        return NULL;
    }
    int k = 0;
    for (int i = 0; i < n; i++)
        if (tokens[i] < eot) t[k++] = tokens[i];
    char *text = sotto_tokenizer_decode(sotto_model_tokenizer(m), t, (size_t)k, err);
    free(t);
    return text;
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

int sotto_suppression_init(sotto_suppression *s, const sotto_model *m, int non_speech, int blank,
                           sotto_err *err) {
    const sotto_special_tokens *sp = sotto_model_special(m);
    ivec r = {0};
    int rc = SOTTO_OK;
    memset(s, 0, sizeof *s);
    if (non_speech) {
        int32_t *ns;
        int n;
        if ((rc = sotto_non_speech_tokens(m, &ns, &n, err))) return rc;
        rc = ivec_push(&r, ns, n);
        free(ns);
    }
    const int32_t specials[] = {sp->transcribe, sp->translate, sp->sot,
                                sp->sot_prev,   sp->sot_lm,    sp->no_speech};
    for (size_t i = 0; i < sizeof specials / sizeof specials[0] && rc == 0; i++)
        rc = add_unique(&r, specials[i]);
    if (rc) {
        free(r.v);
        return sotto_err_set(err, SOTTO_E_NOMEM, "out of memory");
    }
    qsort(r.v, (size_t)r.n, sizeof(int32_t), cmp_i32);
    s->suppress = r.v;
    s->n_suppress = r.n;
    if (blank) {
        int32_t space = sotto_tokenizer_token_id(sotto_model_tokenizer(m), "\xc4\xa0");
        if (space >= 0) s->suppress_begin[s->n_suppress_begin++] = space;
        s->suppress_begin[s->n_suppress_begin++] = sp->eot;
    }
    return SOTTO_OK;
}

void sotto_suppression_free(sotto_suppression *s) {
    free(s->suppress);
    memset(s, 0, sizeof *s);
}

void sotto_suppression_apply(const sotto_suppression *s, sotto_generate_opts *g) {
    g->suppress = s->suppress;
    g->n_suppress = s->n_suppress;
    g->suppress_begin = s->suppress_begin;
    g->n_suppress_begin = s->n_suppress_begin;
}

/* ---- prompt --------------------------------------------------------------- */

int sotto_prompt_build(const sotto_model *m, const sotto_prompt_spec *p, int32_t *out, int cap) {
    const sotto_special_tokens *sp = sotto_model_special(m);
    const int n_ctx = sotto_model_hparams(m)->n_text_ctx, half = n_ctx / 2;
    int ctx = p->n_context;
    if (ctx > half - 1) ctx = half - 1;
    if (ctx > n_ctx - 8 - p->n_prefix - p->min_room) ctx = n_ctx - 8 - p->n_prefix - p->min_room;
    if (ctx < 0 || sp->sot_prev < 0) ctx = 0;
    int need = (ctx ? ctx + 1 : 0) + 4 + (p->prefix_timestamp ? 1 : 0) + p->n_prefix;
    if (need > cap) return SOTTO_E_RANGE;
    int n = 0;
    if (ctx > 0) {
        out[n++] = sp->sot_prev;
        memcpy(out + n, p->context + p->n_context - ctx, sizeof(int32_t) * (size_t)ctx);
        n += ctx;
    }
    out[n++] = sp->sot;
    if (p->lang_token >= 0) out[n++] = p->lang_token;
    if (p->task_token >= 0) out[n++] = p->task_token;
    if (!p->timestamps) out[n++] = sp->no_timestamps;
    if (p->n_prefix > 0) {
        if (p->prefix_timestamp) out[n++] = sp->timestamp_begin;
        memcpy(out + n, p->prefix, sizeof(int32_t) * (size_t)p->n_prefix);
        n += p->n_prefix;
    }
    return n;
}

/* ---- features ------------------------------------------------------------- */

void sotto_window_pad(const float *mel, int n_mels, size_t stride, size_t from, int size,
                      float *win) {
    if (size > SOTTO_N_FRAMES) size = SOTTO_N_FRAMES;
    if (size < 0) size = 0;
    for (int c = 0; c < n_mels; c++) {
        float *dst = win + (size_t)c * SOTTO_N_FRAMES;
        memcpy(dst, mel + (size_t)c * stride + from, sizeof(float) * (size_t)size);
        memset(dst + size, 0, sizeof(float) * (size_t)(SOTTO_N_FRAMES - size));
    }
}

int sotto_audio_is_silent(const float *x, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (fabsf(x[i]) >= 1e-4f) return 0;
    return 1;
}

/* ---- guardrails ------------------------------------------------------------ */

sotto_guard_opts sotto_guard_default_opts(void) {
    sotto_guard_opts o;
    o.compression_ratio_threshold = 2.4f;
    o.log_prob_threshold = -1.0f;
    o.no_speech_threshold = 0.6f;
    o.repetition = 1;
    o.max_tokens_per_s = 10.0f;
    o.max_tokens_base = 16;
    return o;
}

int sotto_guard_max_tokens(const sotto_guard_opts *o, double seconds) {
    if (!(o->max_tokens_per_s > 0)) return 0;
    return o->max_tokens_base + (int)ceil(o->max_tokens_per_s * (seconds > 0 ? seconds : 0));
}

int sotto_guard_is_silent(const sotto_guard_opts *o, const sotto_generate_result *r) {
    if (isnan(o->no_speech_threshold) || !(r->no_speech_prob > o->no_speech_threshold)) return 0;
    return isnan(o->log_prob_threshold) || !(r->avg_logprob > o->log_prob_threshold);
}

/* The index of the token that begins the second copy of a loop that
 * sotto_repetition_find_words finds in text (the decoded tokens), or -1. */
static int word_loop_at(const sotto_model *m, const int32_t *t, int n, const char *text) {
    int second = -1;
    if (!sotto_repetition_find_words(text, &second)) return -1;
    /* the token that begins word `second`: the shortest prefix with more words */
    for (int k = 1; k <= n; k++) {
        sotto_err e;
        sotto_err_clear(&e);
        char *pre = sotto_tokens_text(m, t, k, &e);
        if (!pre) return -1;
        int c = sotto_repetition_count_words(pre);
        free(pre);
        if (c > second) return k - 1;
    }
    return -1;
}

int sotto_guard_check(const sotto_model *m, const sotto_guard_opts *o,
                      const sotto_generate_result *r, double seconds, int prior_tokens,
                      sotto_verdict *v, sotto_err *err) {
    const int32_t eot = sotto_model_special(m)->eot;
    memset(v, 0, sizeof *v);
    v->rep.at = -1;
    char *text = sotto_tokens_text(m, r->tokens, r->n_tokens, err);
    if (!text) return err && err->code ? err->code : SOTTO_E_NOMEM;
    size_t b, e;
    sotto_strip_bounds(text, &b, &e);
    v->compression_ratio = sotto_compression_ratio(text + b, e - b);
    int wloop = o->repetition ? word_loop_at(m, r->tokens, r->n_tokens, text) : -1;
    free(text);
    if (o->compression_ratio_threshold > 0 && v->compression_ratio > o->compression_ratio_threshold)
        v->failed |= SOTTO_GUARD_COMPRESSION;
    if (!isnan(o->log_prob_threshold) && r->avg_logprob < o->log_prob_threshold)
        v->failed |= SOTTO_GUARD_LOGPROB;
    if (o->repetition && sotto_repetition_find(r->tokens, r->n_tokens, eot, &v->rep))
        v->failed |= SOTTO_GUARD_REPETITION;
    if (wloop >= 0 && (!(v->failed & SOTTO_GUARD_REPETITION) || wloop < v->rep.at)) {
        v->failed |= SOTTO_GUARD_REPETITION;
        v->rep.found = 1;
        v->rep.at = wloop;
        v->rep.period = SOTTO_WORD_LOOP_N;
        v->rep.copies = 3;
    }
    v->max_tokens = sotto_guard_max_tokens(o, seconds);
    v->prior_tokens = prior_tokens;
    if (v->max_tokens > 0) {
        int text_tokens = prior_tokens;
        for (int i = 0; i < r->n_tokens; i++) text_tokens += r->tokens[i] < eot;
        if (text_tokens > v->max_tokens) v->failed |= SOTTO_GUARD_TOO_LONG;
    }
    /* Whisper: a window with a high no-speech probability and a low
       log-probability is silence, not a failure (it is dropped) */
    if (!isnan(o->no_speech_threshold) && r->no_speech_prob > o->no_speech_threshold &&
        !isnan(o->log_prob_threshold) && r->avg_logprob < o->log_prob_threshold) {
        v->silent = 1;
        v->failed = 0;
    }
    return SOTTO_OK;
}

void sotto_guard_trim(const sotto_model *m, const sotto_verdict *v, sotto_generate_result *r) {
    const int32_t eot = sotto_model_special(m)->eot;
    int cut = r->n_tokens;
    if ((v->failed & SOTTO_GUARD_REPETITION) && v->rep.at >= 0 && v->rep.at < cut) cut = v->rep.at;
    if ((v->failed & SOTTO_GUARD_TOO_LONG) && v->max_tokens > 0) {
        int text = v->prior_tokens;
        for (int i = 0; i < cut; i++)
            if (r->tokens[i] < eot && ++text > v->max_tokens) {
                cut = i;
                break;
            }
    }
    if (cut < r->n_tokens) {
        r->n_tokens = cut;
        r->ended = 0;
    }
}

/* ---- one window with fallback ------------------------------------------- */

#define HARD_FAILURES (SOTTO_GUARD_REPETITION | SOTTO_GUARD_TOO_LONG)

/* Rank of a failed attempt when all failed, lower is better: what still
 * fails once sotto_guard_trim has cut its loop or overflow (a loop also
 * explains a high compression ratio). A looping greedy hypothesis, cut,
 * is usually the right text; a sampled one that fails the log-probability
 * test is usually invented. */
static int failure_rank(const sotto_verdict *v) {
    int left = v->failed;
    if (left & HARD_FAILURES) left &= ~(HARD_FAILURES | SOTTO_GUARD_COMPRESSION);
    return ((left & SOTTO_GUARD_COMPRESSION) ? 2 : 0) + ((left & SOTTO_GUARD_LOGPROB) ? 1 : 0);
}

int sotto_window_decode(const sotto_model *m, sotto_workspace *ws, sotto_state *st,
                        const int32_t *prompt, int n_prompt, const sotto_window_opts *o,
                        double seconds, int prior_tokens, int first, sotto_window_result *done,
                        sotto_window_result *out, sotto_err *err) {
    sotto_window_result tries[SOTTO_MAX_TEMPERATURES + 1];
    int n_tries = 0, chosen = -1, rc = SOTTO_OK;
    if (done) { /* taken over */
        tries[n_tries++] = *done;
        memset(done, 0, sizeof *done);
    }
    int n_temps = o->n_temperatures > 0 ? o->n_temperatures : 1;
    if (n_temps > SOTTO_MAX_TEMPERATURES) n_temps = SOTTO_MAX_TEMPERATURES;
    memset(out, 0, sizeof *out);
    if (first < 0) first = 0;
    for (int ti = first; ti < n_temps; ti++) {
        float T = o->n_temperatures > 0 ? o->temperatures[ti] : 0.0f;
        sotto_generate_opts g = o->gen;
        g.temperature = T;
        g.beam_size = T > 0.0f ? 1 : o->beam_size;
        g.best_of = T > 0.0f ? o->best_of : 1;
        if (T > 0.0f) g.on_token = NULL; /* sampled hypotheses are not streamed */
        g.seed = o->gen.seed + (uint64_t)ti * 7919u;
        sotto_window_result *a = &tries[n_tries];
        memset(a, 0, sizeof *a);
        if ((rc = sotto_generate(m, ws, st, prompt, n_prompt, &g, &a->res, err))) break;
        n_tries++;
        a->temperature = T;
        if ((rc = sotto_guard_check(m, &o->guard, &a->res, seconds, prior_tokens, &a->v, err))) break;
        if (!a->v.failed) {
            chosen = n_tries - 1;
            break;
        }
        SOTTO_DEBUG("temperature %.1f failed (%s%s%s%s; compression %.2f, avg logprob %.3f)", T,
                    a->v.failed & SOTTO_GUARD_COMPRESSION ? "compression " : "",
                    a->v.failed & SOTTO_GUARD_LOGPROB ? "logprob " : "",
                    a->v.failed & SOTTO_GUARD_REPETITION ? "repetition " : "",
                    a->v.failed & SOTTO_GUARD_TOO_LONG ? "too long" : "", a->v.compression_ratio,
                    a->res.avg_logprob);
    }
    int all_failed = rc == SOTTO_OK && chosen < 0 && n_tries > 0;
    const int made = n_tries - (done ? 1 : 0);
    if (all_failed) {
        /* the least bad: fewest failures left after the cut, then the best
           average log-probability */
        int best_rank = 99;
        for (int i = 0; i < n_tries; i++) {
            int r = failure_rank(&tries[i].v);
            if (r < best_rank) best_rank = r;
        }
        for (int i = 0; i < n_tries; i++) {
            if (failure_rank(&tries[i].v) != best_rank) continue;
            if (chosen < 0 || tries[i].res.avg_logprob > tries[chosen].res.avg_logprob) chosen = i;
        }
        tries[chosen].temperature = tries[n_tries - 1].temperature;
    }
    for (int i = 0; i < n_tries; i++) {
        if (i == chosen && rc == SOTTO_OK)
            *out = tries[i];
        else
            sotto_generate_result_free(&tries[i].res);
    }
    if (rc) return rc;
    if (chosen < 0) return sotto_err_set(err, SOTTO_E_INTERNAL, "no decoding attempt was made");
    out->attempts = made;
    out->all_failed = all_failed;
    if (all_failed) sotto_guard_trim(m, &out->v, &out->res);
    return SOTTO_OK;
}
