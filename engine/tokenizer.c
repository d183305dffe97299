/* tokenizer.c - the tokenizer's tables: GPT-2's byte <-> code point map,
 * strict UTF-8 decoding, the string arena, the token string hash, the merge
 * hash, and the public accessors. Loading is in tokenizer_load.c; encoding
 * and decoding are in tokenizer_bpe.c.
 */
#include "tokenizer_internal.h"

#include <stdlib.h>
#include <string.h>

/* ---- GPT-2 bytes_to_unicode ------------------------------------------- */

/* Bytes that stand for themselves: '!'..'~', U+00A1..U+00AC, U+00AE..U+00FF.
 * The other 68 bytes map, in increasing order, to U+0100 + n: bytes
 * 0x00..0x20 to n = 0..32, 0x7F..0xA0 to n = 33..66 and 0xAD to n = 67. */
static int byte_is_printable(unsigned b) {
    return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
}

uint32_t sotto_tok_byte_to_cp(unsigned char b) {
    if (byte_is_printable(b)) return b;
    if (b <= 0x20) return 256u + b;
    if (b <= 0xA0) return 256u + 33u + (b - 0x7Fu);
    return 256u + 67u; /* 0xAD */
}

int sotto_tok_cp_to_byte(uint32_t cp) {
    if (cp < 256) return byte_is_printable(cp) ? (int)cp : -1;
    uint32_t n = cp - 256;
    if (n <= 32) return (int)n;
    if (n <= 66) return (int)(0x7F + n - 33);
    return n == 67 ? 0xAD : -1;
}

/* ---- UTF-8 --------------------------------------------------------------- */

size_t sotto_tok_utf8_next(const unsigned char *s, size_t len, uint32_t *cp) {
    if (len == 0) return 0;
    unsigned char c = s[0];
    if (c < 0x80) {
        *cp = c;
        return 1;
    }
    size_t n;
    uint32_t v, min;
    unsigned char lo = 0x80, hi = 0xBF; /* allowed range of the 2nd byte */
    if (c >= 0xC2 && c <= 0xDF) {
        n = 2, v = c & 0x1F, min = 0x80;
    } else if (c >= 0xE0 && c <= 0xEF) {
        n = 3, v = c & 0x0F, min = 0x800;
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F; /* no surrogates */
    } else if (c >= 0xF0 && c <= 0xF4) {
        n = 4, v = c & 0x07, min = 0x10000;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;
    } else {
        return 0;
    }
    if (len < n) return 0;
    if (s[1] < lo || s[1] > hi) return 0;
    for (size_t i = 1; i < n; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        v = (v << 6) | (s[i] & 0x3F);
    }
    if (v < min) return 0;
    *cp = v;
    return n;
}

/* ---- arena ------------------------------------------------------------- */

int sotto_tok_arena_add(sotto_tokenizer *tok, const void *data, size_t len, int nul,
                        uint32_t *off) {
    size_t need = tok->arena_len + len + (nul ? 1 : 0);
    if (need < tok->arena_len || need >= SOTTO_TOK_NONE) return SOTTO_E_RANGE;
    if (need > tok->arena_cap) {
        size_t cap = tok->arena_cap ? tok->arena_cap : 65536;
        while (cap < need) cap *= 2;
        char *p = realloc(tok->arena, cap);
        if (!p) return SOTTO_E_NOMEM;
        tok->arena = p;
        tok->arena_cap = cap;
    }
    *off = (uint32_t)tok->arena_len;
    if (len) memcpy(tok->arena + tok->arena_len, data, len);
    tok->arena_len += len;
    if (nul) tok->arena[tok->arena_len++] = '\0';
    return SOTTO_OK;
}

/* ---- token string hash ---------------------------------------------------- */

static uint64_t hash_bytes(const char *s, size_t len) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (size_t i = 0; i < len; i++) {
        h ^= (unsigned char)s[i];
        h *= 1099511628211ull;
    }
    return h;
}

static int slot_matches(const sotto_tokenizer *tok, int32_t id, const char *s, size_t len) {
    return tok->str_len[id] == len && memcmp(tok->arena + tok->str_off[id], s, len) == 0;
}

int32_t sotto_tok_find(const sotto_tokenizer *tok, const char *s, size_t len) {
    if (!tok->str_slots) return -1;
    size_t i = (size_t)hash_bytes(s, len) & tok->str_mask;
    for (;;) {
        int32_t id = tok->str_slots[i];
        if (id < 0) return -1;
        if (slot_matches(tok, id, s, len)) return id;
        i = (i + 1) & tok->str_mask;
    }
}

/* Inserts id under its own string; replaces an id stored under the same string. */
static void str_hash_put(sotto_tokenizer *tok, int32_t id) {
    const char *s = tok->arena + tok->str_off[id];
    size_t len = tok->str_len[id];
    size_t i = (size_t)hash_bytes(s, len) & tok->str_mask;
    while (tok->str_slots[i] >= 0 && !slot_matches(tok, tok->str_slots[i], s, len))
        i = (i + 1) & tok->str_mask;
    tok->str_slots[i] = id;
}

static size_t pow2_at_least(size_t n) {
    size_t p = 16;
    while (p < n) p *= 2;
    return p;
}

/* Raw bytes of token `id`: the inverse byte map of each character, or the
 * string itself when some character stands for no byte (as HF's ByteLevel
 * decoder does). */
static int compute_raw_bytes(sotto_tokenizer *tok, int32_t id, unsigned char *tmp) {
    const unsigned char *s = (const unsigned char *)tok->arena + tok->str_off[id];
    size_t len = tok->str_len[id], n = 0, i = 0;
    tok->bytes_off[id] = tok->str_off[id];
    tok->bytes_len[id] = (uint32_t)len;
    while (i < len) {
        uint32_t cp;
        size_t k = sotto_tok_utf8_next(s + i, len - i, &cp);
        int b = k ? sotto_tok_cp_to_byte(cp) : -1;
        if (b < 0) return SOTTO_OK; /* keep the string's own bytes */
        tmp[n++] = (unsigned char)b;
        i += k;
    }
    if (n == len && memcmp(tmp, s, n) == 0) return SOTTO_OK;
    uint32_t off;
    int rc = sotto_tok_arena_add(tok, tmp, n, 0, &off);
    if (rc != SOTTO_OK) return rc;
    tok->bytes_off[id] = off;
    tok->bytes_len[id] = (uint32_t)n;
    return SOTTO_OK;
}

static int alloc_vocab_arrays(sotto_tokenizer *tok, int32_t n) {
    size_t un = (size_t)n;
    tok->str_off = malloc(un * sizeof *tok->str_off);
    tok->str_len = calloc(un, sizeof *tok->str_len);
    tok->bytes_off = calloc(un, sizeof *tok->bytes_off);
    tok->bytes_len = calloc(un, sizeof *tok->bytes_len);
    tok->special = calloc(un, 1);
    if (!tok->str_off || !tok->str_len || !tok->bytes_off || !tok->bytes_len || !tok->special)
        return SOTTO_E_NOMEM;
    for (size_t i = 0; i < un; i++) tok->str_off[i] = SOTTO_TOK_NONE;
    return SOTTO_OK;
}

static void fill_byte_ids(sotto_tokenizer *tok) {
    for (unsigned b = 0; b < 256; b++) {
        uint32_t cp = sotto_tok_byte_to_cp((unsigned char)b);
        char u[2];
        size_t n = 1;
        if (cp < 0x80) {
            u[0] = (char)cp;
        } else {
            u[0] = (char)(0xC0 | (cp >> 6));
            u[1] = (char)(0x80 | (cp & 0x3F));
            n = 2;
        }
        tok->byte_id[b] = sotto_tok_find(tok, u, n);
    }
}

int sotto_tok_build_vocab(sotto_tokenizer *tok, const sotto_tok_entry *e, size_t n,
                          sotto_err *err) {
    int32_t max_id = -1;
    size_t max_len = 0;
    for (size_t i = 0; i < n; i++) {
        if (e[i].id > max_id) max_id = e[i].id;
        if (e[i].len > max_len) max_len = e[i].len;
    }
    if (max_id < 0) return sotto_err_set(err, SOTTO_E_FORMAT, "empty vocabulary");
    tok->n_vocab = max_id + 1;
    unsigned char *tmp = NULL;
    int rc = alloc_vocab_arrays(tok, tok->n_vocab);
    if (rc != SOTTO_OK) goto fail;
    tok->str_mask = pow2_at_least(2 * (size_t)tok->n_vocab) - 1;
    tok->str_slots = malloc((tok->str_mask + 1) * sizeof *tok->str_slots);
    tmp = malloc(max_len + 1);
    rc = SOTTO_E_NOMEM;
    if (!tok->str_slots || !tmp) goto fail;
    memset(tok->str_slots, 0xFF, (tok->str_mask + 1) * sizeof *tok->str_slots);
    for (size_t i = 0; i < n; i++) {
        tok->str_off[e[i].id] = e[i].off;
        tok->str_len[e[i].id] = e[i].len;
        tok->special[e[i].id] = e[i].special;
    }
    for (size_t i = 0; i < n; i++)
        if (tok->str_off[e[i].id] == e[i].off) str_hash_put(tok, e[i].id);
    for (int32_t id = 0; id < tok->n_vocab; id++) {
        if (tok->str_off[id] == SOTTO_TOK_NONE) continue;
        rc = compute_raw_bytes(tok, id, tmp);
        if (rc != SOTTO_OK) goto fail;
    }
    fill_byte_ids(tok);
    free(tmp);
    return SOTTO_OK;
fail:
    free(tmp);
    return sotto_err_set(err, rc, "cannot build the vocabulary tables: %s",
                         sotto_strerror(rc));
}

/* ---- merge hash ------------------------------------------------------------ */

static uint64_t merge_key(int32_t left, int32_t right) {
    return ((uint64_t)(uint32_t)(left + 1) << 32) | (uint32_t)(right + 1);
}

static size_t merge_slot(const sotto_tokenizer *tok, uint64_t key) {
    uint64_t h = key * 0x9E3779B97F4A7C15ull;
    size_t i = (size_t)(h ^ (h >> 29)) & tok->merge_mask;
    while (tok->merges[i].key != 0 && tok->merges[i].key != key)
        i = (i + 1) & tok->merge_mask;
    return i;
}

int sotto_tok_reserve_merges(sotto_tokenizer *tok, size_t n, sotto_err *err) {
    size_t cap = pow2_at_least(2 * n + 1);
    tok->merges = calloc(cap, sizeof *tok->merges);
    if (!tok->merges) return sotto_err_set(err, SOTTO_E_NOMEM, "out of memory for merges");
    tok->merge_mask = cap - 1;
    tok->n_merges = 0;
    return SOTTO_OK;
}

int sotto_tok_add_merge(sotto_tokenizer *tok, const char *a, size_t alen, const char *b,
                        size_t blen, int32_t rank, const char *what, sotto_err *err) {
    int32_t ia = sotto_tok_find(tok, a, alen);
    int32_t ib = sotto_tok_find(tok, b, blen);
    if (ia < 0 || ib < 0)
        return sotto_err_set(err, SOTTO_E_FORMAT,
                             "%s: merge %d (\"%.*s\" \"%.*s\") uses an unknown token", what,
                             (int)rank, (int)alen, a, (int)blen, b);
    char small[256];
    char *buf = alen + blen <= sizeof small ? small : malloc(alen + blen);
    if (!buf) return sotto_err_set(err, SOTTO_E_NOMEM, "%s: out of memory", what);
    memcpy(buf, a, alen);
    memcpy(buf + alen, b, blen);
    int32_t merged = sotto_tok_find(tok, buf, alen + blen);
    if (buf != small) free(buf);
    if (merged < 0)
        return sotto_err_set(err, SOTTO_E_FORMAT,
                             "%s: merge %d (\"%.*s\" \"%.*s\") makes a token that is not "
                             "in the vocabulary", what, (int)rank, (int)alen, a, (int)blen, b);
    if (tok->n_merges + 1 > (tok->merge_mask + 1) / 2)
        return sotto_err_set(err, SOTTO_E_INTERNAL, "%s: more merges than reserved", what);
    uint64_t key = merge_key(ia, ib);
    size_t i = merge_slot(tok, key);
    if (tok->merges[i].key == 0) tok->n_merges++;
    tok->merges[i].key = key;
    tok->merges[i].rank = rank;
    tok->merges[i].merged = merged;
    return SOTTO_OK;
}

int sotto_tok_merge_lookup(const sotto_tokenizer *tok, int32_t left, int32_t right,
                           int32_t *rank, int32_t *merged) {
    if (!tok->merges) return 0;
    const sotto_tok_merge *m = &tok->merges[merge_slot(tok, merge_key(left, right))];
    if (m->key == 0) return 0;
    *rank = m->rank;
    *merged = m->merged;
    return 1;
}

/* ---- public accessors ---------------------------------------------------- */

void sotto_tokenizer_free(sotto_tokenizer *tok) {
    if (!tok) return;
    free(tok->str_off);
    free(tok->str_len);
    free(tok->bytes_off);
    free(tok->bytes_len);
    free(tok->special);
    free(tok->arena);
    free(tok->str_slots);
    free(tok->merges);
    free(tok);
}

int32_t sotto_tokenizer_n_vocab(const sotto_tokenizer *tok) {
    return tok ? tok->n_vocab : 0;
}

int32_t sotto_tokenizer_token_id(const sotto_tokenizer *tok, const char *token) {
    if (!tok || !token) return -1;
    return sotto_tok_find(tok, token, strlen(token));
}

static int id_known(const sotto_tokenizer *tok, int32_t id) {
    return tok && id >= 0 && id < tok->n_vocab && tok->str_off[id] != SOTTO_TOK_NONE;
}

const char *sotto_tokenizer_token_str(const sotto_tokenizer *tok, int32_t id) {
    return id_known(tok, id) ? tok->arena + tok->str_off[id] : NULL;
}

int sotto_tokenizer_is_special(const sotto_tokenizer *tok, int32_t id) {
    return id_known(tok, id) ? tok->special[id] : 0;
}

int sotto_tokenizer_token_bytes(const sotto_tokenizer *tok, int32_t id,
                                const unsigned char **bytes, size_t *len) {
    if (!id_known(tok, id)) return SOTTO_E_NOTFOUND;
    if (tok->special[id]) return SOTTO_E_INVALID;
    *bytes = (const unsigned char *)tok->arena + tok->bytes_off[id];
    *len = tok->bytes_len[id];
    return SOTTO_OK;
}

int sotto_tokenizer_can_encode(const sotto_tokenizer *tok) {
    return tok ? tok->can_encode : 0;
}
