/* tokenizer_bpe.c - encoding (GPT-2 pre-tokenizer + BPE merges) and
 * decoding (token bytes -> UTF-8 with U+FFFD for invalid sequences).
 *
 * The pre-tokenizer is the regex of GPT-2 / HF ByteLevel(use_regex=True),
 *   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 * matched by hand over code point classes. Each piece is then split into its
 * bytes (one token each) and merged with the lowest-rank-pair-first rule,
 * leftmost first among equal ranks, using a binary heap with lazy deletion.
 * All scratch memory is per call, so a tokenizer can be shared by threads.
 */
#include "tokenizer_internal.h"
#include "unicode_tables.h"

#include <stdlib.h>
#include <string.h>

/* ---- pre-tokenizer ----------------------------------------------------- */

enum { CL_LETTER = 1, CL_NUMBER = 2, CL_SPACE = 3, CL_OTHER = 4 };

/* The text as code points: class, value (ASCII only, else 0) and byte offset. */
typedef struct cp_text {
    uint8_t *cls;
    uint8_t *ascii;
    size_t *off; /* [n + 1] */
    size_t n;
} cp_text;

static uint8_t classify(uint32_t cp) {
    if (cp < 0x80) {
        if ((cp | 0x20) >= 'a' && (cp | 0x20) <= 'z') return CL_LETTER;
        if (cp >= '0' && cp <= '9') return CL_NUMBER;
        if (cp == ' ' || (cp >= 0x09 && cp <= 0x0D)) return CL_SPACE;
        return CL_OTHER;
    }
    if (sotto_uc_is_letter(cp)) return CL_LETTER;
    if (sotto_uc_is_number(cp)) return CL_NUMBER;
    if (sotto_uc_is_space(cp)) return CL_SPACE;
    return CL_OTHER;
}

static void cp_text_free(cp_text *t) {
    free(t->cls);
    free(t->ascii);
    free(t->off);
}

/* Validates UTF-8 and fills t; SOTTO_E_FORMAT names the first bad byte. */
static int cp_text_init(cp_text *t, const unsigned char *s, size_t len, sotto_err *err) {
    memset(t, 0, sizeof *t);
    t->cls = malloc(len + 1);
    t->ascii = malloc(len + 1);
    t->off = malloc((len + 1) * sizeof *t->off);
    if (!t->cls || !t->ascii || !t->off)
        return sotto_err_set(err, SOTTO_E_NOMEM, "tokenizer: out of memory for %zu bytes", len);
    size_t i = 0;
    while (i < len) {
        uint32_t cp;
        size_t k = sotto_tok_utf8_next(s + i, len - i, &cp);
        if (k == 0)
            return sotto_err_set(err, SOTTO_E_FORMAT,
                                 "tokenizer: invalid UTF-8 at byte %zu of the text", i);
        t->off[t->n] = i;
        t->ascii[t->n] = cp < 0x80 ? (uint8_t)cp : 0;
        t->cls[t->n] = classify(cp);
        t->n++;
        i += k;
    }
    t->off[t->n] = len;
    return SOTTO_OK;
}

static size_t run_of(const cp_text *t, size_t i, uint8_t cls) {
    while (i < t->n && t->cls[i] == cls) i++;
    return i;
}

/* Length 2 or 3 of a contraction ('s 't 're 've 'm 'll 'd) at i, else 0. */
static size_t contraction_at(const cp_text *t, size_t i) {
    if (t->ascii[i] != '\'' || i + 1 >= t->n) return 0;
    uint8_t a = t->ascii[i + 1];
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
    if (i + 2 >= t->n) return 0;
    uint8_t b = t->ascii[i + 2];
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
    return 0;
}

/* End (code point index) of the regex match that starts at i < t->n. */
static size_t piece_end(const cp_text *t, size_t i) {
    size_t k = contraction_at(t, i);
    if (k) return i + k;
    uint8_t c = t->cls[i];
    if (c != CL_SPACE) return run_of(t, i + 1, c); /* \p{L}+, \p{N}+ or [^\s\p{L}\p{N}]+ */
    if (t->ascii[i] == ' ' && i + 1 < t->n && t->cls[i + 1] != CL_SPACE)
        return run_of(t, i + 2, t->cls[i + 1]); /* " ?" + one of the three runs */
    size_t j = run_of(t, i + 1, CL_SPACE);
    if (j == t->n || j - i == 1) return j; /* \s+(?!\S) at the end, or \s+ */
    return j - 1;                          /* leave the last space to the next word */
}

/* ---- BPE merging -------------------------------------------------------- */

typedef struct bpe_item {
    int32_t rank;
    int32_t pos;
} bpe_item;

/* Per-call scratch, grown to the longest piece. */
typedef struct bpe_scratch {
    int32_t *id, *prev, *next;
    bpe_item *heap;
    size_t cap, heap_n;
} bpe_scratch;

static void scratch_free(bpe_scratch *s) {
    free(s->id);
    free(s->prev);
    free(s->next);
    free(s->heap);
}

static int scratch_reserve(bpe_scratch *s, size_t n) {
    if (n <= s->cap) return SOTTO_OK;
    size_t cap = s->cap ? s->cap : 64;
    while (cap < n) cap *= 2;
    scratch_free(s);
    memset(s, 0, sizeof *s);
    s->id = malloc(cap * sizeof *s->id);
    s->prev = malloc(cap * sizeof *s->prev);
    s->next = malloc(cap * sizeof *s->next);
    s->heap = malloc(3 * cap * sizeof *s->heap);
    if (!s->id || !s->prev || !s->next || !s->heap) return SOTTO_E_NOMEM;
    s->cap = cap;
    return SOTTO_OK;
}

static int item_less(bpe_item a, bpe_item b) {
    return a.rank < b.rank || (a.rank == b.rank && a.pos < b.pos);
}

static void heap_push(bpe_scratch *s, bpe_item it) {
    size_t i = s->heap_n++;
    while (i > 0 && item_less(it, s->heap[(i - 1) / 2])) {
        s->heap[i] = s->heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    s->heap[i] = it;
}

static bpe_item heap_pop(bpe_scratch *s) {
    bpe_item top = s->heap[0], last = s->heap[--s->heap_n];
    size_t i = 0, n = s->heap_n;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && item_less(s->heap[c + 1], s->heap[c])) c++;
        if (!item_less(s->heap[c], last)) break;
        s->heap[i] = s->heap[c];
        i = c;
    }
    s->heap[i] = last;
    return top;
}

/* Queues the pair starting at symbol pos if a merge rule covers it. */
static void push_pair(const sotto_tokenizer *tok, bpe_scratch *s, int32_t pos) {
    int32_t rank, merged;
    if (pos < 0 || s->next[pos] < 0) return;
    if (sotto_tok_merge_lookup(tok, s->id[pos], s->id[s->next[pos]], &rank, &merged))
        heap_push(s, (bpe_item){rank, pos});
}

/* Merges the n symbols in s->id in place; the result is the list linked by
 * s->next from symbol 0 (the first symbol always survives). */
static void bpe_merge(const sotto_tokenizer *tok, bpe_scratch *s, int32_t n) {
    s->heap_n = 0;
    for (int32_t k = 0; k < n; k++) {
        s->prev[k] = k - 1;
        s->next[k] = k + 1 < n ? k + 1 : -1;
    }
    for (int32_t k = 0; k + 1 < n; k++) push_pair(tok, s, k);
    while (s->heap_n > 0) {
        bpe_item it = heap_pop(s);
        int32_t pos = it.pos, right = s->next[pos], rank, merged;
        if (s->id[pos] < 0 || right < 0) continue; /* symbol gone or now last */
        if (!sotto_tok_merge_lookup(tok, s->id[pos], s->id[right], &rank, &merged) ||
            rank != it.rank)
            continue; /* stale: the pair at pos changed since it was queued */
        s->id[pos] = merged;
        s->id[right] = -1;
        s->next[pos] = s->next[right];
        if (s->next[pos] >= 0) s->prev[s->next[pos]] = pos;
        push_pair(tok, s, s->prev[pos]);
        push_pair(tok, s, pos);
    }
}

typedef struct id_sink {
    int32_t *out;
    size_t cap, n;
} id_sink;

static void sink_put(id_sink *k, int32_t id) {
    if (k->n < k->cap) k->out[k->n] = id;
    k->n++;
}

/* Encodes one pre-token piece (raw bytes). */
static int encode_piece(const sotto_tokenizer *tok, const unsigned char *p, size_t len,
                        bpe_scratch *s, id_sink *sink) {
    if (tok->ignore_merges) { /* whole-piece lookup first, in byte-level form */
        char buf[256];
        size_t n = 0, i = 0;
        for (; i < len && n + 2 <= sizeof buf; i++) {
            uint32_t cp = sotto_tok_byte_to_cp(p[i]);
            if (cp >= 0x80) {
                buf[n++] = (char)(0xC0 | (cp >> 6));
                cp = 0x80 | (cp & 0x3F);
            }
            buf[n++] = (char)cp;
        }
        int32_t id = i == len ? sotto_tok_find(tok, buf, n) : -1;
        if (id >= 0) {
            sink_put(sink, id);
            return SOTTO_OK;
        }
    }
    if (scratch_reserve(s, len) != SOTTO_OK) return SOTTO_E_NOMEM;
    int32_t n = 0;
    for (size_t i = 0; i < len; i++) /* bytes without a token are dropped, as HF does */
        if (tok->byte_id[p[i]] >= 0) s->id[n++] = tok->byte_id[p[i]];
    if (n == 0) return SOTTO_OK;
    bpe_merge(tok, s, n);
    for (int32_t k = 0; k >= 0; k = s->next[k]) sink_put(sink, s->id[k]);
    return SOTTO_OK;
}

int sotto_tokenizer_encode(const sotto_tokenizer *tok, const char *text, size_t len,
                           int32_t *out, size_t cap, size_t *n_out, sotto_err *err) {
    cp_text t;
    bpe_scratch s = {0};
    id_sink sink = {out, out ? cap : 0, 0};
    if (n_out) *n_out = 0;
    if (!tok || !n_out || (!text && len))
        return sotto_err_set(err, SOTTO_E_INVALID, "tokenizer: bad encode arguments");
    if (!tok->can_encode)
        return sotto_err_set(err, SOTTO_E_UNSUPPORTED,
                             "tokenizer: no merges loaded (decode-only vocabulary)");
    const unsigned char *u = (const unsigned char *)text;
    int rc = cp_text_init(&t, u, len, err);
    for (size_t i = 0; rc == SOTTO_OK && i < t.n;) {
        size_t j = piece_end(&t, i);
        rc = encode_piece(tok, u + t.off[i], t.off[j] - t.off[i], &s, &sink);
        if (rc != SOTTO_OK) rc = sotto_err_set(err, rc, "tokenizer: out of memory");
        i = j;
    }
    cp_text_free(&t);
    scratch_free(&s);
    if (rc != SOTTO_OK) return rc;
    *n_out = sink.n;
    if (sink.n > sink.cap)
        return sotto_err_set(err, SOTTO_E_RANGE, "tokenizer: %zu ids do not fit in %zu",
                             sink.n, cap);
    return SOTTO_OK;
}

/* ---- decoding --------------------------------------------------------------- */

/* Length of the longest prefix of s[0..len) that starts a valid UTF-8
 * sequence (a "maximal subpart"), at least 1. Used after utf8_next failed. */
static size_t invalid_prefix_len(const unsigned char *s, size_t len) {
    unsigned char c = s[0], lo = 0x80, hi = 0xBF;
    size_t need;
    if (c >= 0xC2 && c <= 0xDF) need = 2;
    else if (c >= 0xE0 && c <= 0xEF) need = 3;
    else if (c >= 0xF0 && c <= 0xF4) need = 4;
    else return 1;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
    size_t k = 1;
    if (k < len && k < need && s[k] >= lo && s[k] <= hi) k++;
    else return 1;
    while (k < len && k < need && (s[k] & 0xC0) == 0x80) k++;
    return k;
}

char *sotto_tokenizer_decode(const sotto_tokenizer *tok, const int32_t *ids, size_t n,
                             sotto_err *err) {
    size_t total = 0;
    for (size_t i = 0; tok && i < n; i++) {
        const unsigned char *b;
        size_t bl;
        if (sotto_tokenizer_token_bytes(tok, ids[i], &b, &bl) == SOTTO_OK) total += bl;
    }
    unsigned char *raw = malloc(total + 1);
    char *res = malloc(3 * total + 1); /* each bad byte may grow to U+FFFD */
    if (!raw || !res) {
        free(raw);
        free(res);
        sotto_err_set(err, SOTTO_E_NOMEM, "tokenizer: out of memory decoding %zu ids", n);
        return NULL;
    }
    size_t len = 0, o = 0;
    for (size_t i = 0; tok && i < n; i++) {
        const unsigned char *b;
        size_t bl;
        if (sotto_tokenizer_token_bytes(tok, ids[i], &b, &bl) != SOTTO_OK) continue;
        memcpy(raw + len, b, bl);
        len += bl;
    }
    for (size_t i = 0; i < len;) {
        uint32_t cp;
        size_t k = sotto_tok_utf8_next(raw + i, len - i, &cp);
        if (k) {
            memcpy(res + o, raw + i, k);
            o += k;
            i += k;
        } else {
            memcpy(res + o, "\xEF\xBF\xBD", 3);
            o += 3;
            i += invalid_prefix_len(raw + i, len - i);
        }
    }
    res[o] = '\0';
    free(raw);
    return res;
}
