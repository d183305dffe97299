/* tokenizer_internal.h - private layout of sotto_tokenizer, shared by
 * tokenizer.c (tables, lookups, accessors), tokenizer_load.c (file parsing)
 * and tokenizer_bpe.c (pre-tokenizer, BPE merging, encode/decode).
 * Nothing here is part of the public API.
 *
 * Ownership: every array and the string arena belong to the tokenizer and are
 * released by sotto_tokenizer_free(). All strings live in `arena` and are
 * addressed by 32-bit offsets so that the arena may grow during loading.
 */
#ifndef SOTTO_TOKENIZER_INTERNAL_H
#define SOTTO_TOKENIZER_INTERNAL_H

#include "tokenizer.h"

#include <stddef.h>
#include <stdint.h>

#define SOTTO_TOK_NONE UINT32_MAX      /* "no token" in str_off */
#define SOTTO_TOK_MAX_ID (1 << 24)     /* ids at or past this are rejected */

/* One merge rule: the pair (left, right) of token ids becomes `merged`;
 * lower rank merges first. key == 0 marks an empty hash slot (a real key
 * is ((left + 1) << 32) | (right + 1), never 0). */
typedef struct sotto_tok_merge {
    uint64_t key;
    int32_t rank;
    int32_t merged;
} sotto_tok_merge;

struct sotto_tokenizer {
    int32_t n_vocab;        /* 1 + largest id */
    uint32_t *str_off;      /* [n_vocab] stored string (NUL-terminated) or SOTTO_TOK_NONE */
    uint32_t *str_len;      /* [n_vocab] its length in bytes */
    uint32_t *bytes_off;    /* [n_vocab] raw (decoded) bytes of the token */
    uint32_t *bytes_len;    /* [n_vocab] their count */
    uint8_t *special;       /* [n_vocab] 1 for special tokens */

    char *arena;            /* all strings and raw byte runs */
    size_t arena_len, arena_cap;

    int32_t *str_slots;     /* open-addressing hash: id, or -1 for empty */
    size_t str_mask;        /* slot count - 1 (power of two) */

    sotto_tok_merge *merges; /* open-addressing hash of merge rules */
    size_t merge_mask;       /* slot count - 1; 0 with merges == NULL */
    size_t n_merges;

    int32_t byte_id[256];   /* id of the token for each single byte, -1 if absent */
    int ignore_merges;      /* HF BPE "ignore_merges": whole-word lookup first */
    int can_encode;
};

/* GPT-2 bytes_to_unicode: code point standing for byte b (< 324). */
uint32_t sotto_tok_byte_to_cp(unsigned char b);
/* Inverse: byte for code point cp, or -1 if cp stands for no byte. */
int sotto_tok_cp_to_byte(uint32_t cp);

/* Decodes one UTF-8 sequence strictly (no overlongs, surrogates or values
 * past U+10FFFF). Returns its length (1..4) and sets *cp, or 0 if invalid
 * or truncated. */
size_t sotto_tok_utf8_next(const unsigned char *s, size_t len, uint32_t *cp);

/* Appends bytes to the arena (plus a NUL when nul != 0) and returns the
 * offset of the first one in *off. SOTTO_E_NOMEM / SOTTO_E_RANGE on failure. */
int sotto_tok_arena_add(sotto_tokenizer *tok, const void *data, size_t len, int nul,
                        uint32_t *off);

/* Id of the token whose stored string is exactly s[0..len), or -1. */
int32_t sotto_tok_find(const sotto_tokenizer *tok, const char *s, size_t len);

/* Builds the per-id tables and the string hash from `n` (id, string offset,
 * length, special) entries whose strings are already in the arena. Later
 * entries win for the same id and for the same string. Also fills byte_id
 * and each token's raw bytes. */
typedef struct sotto_tok_entry {
    int32_t id;
    uint32_t off, len;
    uint8_t special;
} sotto_tok_entry;
int sotto_tok_build_vocab(sotto_tokenizer *tok, const sotto_tok_entry *e, size_t n,
                          sotto_err *err);

/* Adds a merge rule for the token strings a and b (ranks are given in file
 * order, a later duplicate replaces the earlier one). SOTTO_E_FORMAT if a, b
 * or a+b is not in the vocabulary; `what` names the file for messages. */
int sotto_tok_add_merge(sotto_tokenizer *tok, const char *a, size_t alen, const char *b,
                        size_t blen, int32_t rank, const char *what, sotto_err *err);
/* Sizes the merge hash for `n` rules; call once before sotto_tok_add_merge. */
int sotto_tok_reserve_merges(sotto_tokenizer *tok, size_t n, sotto_err *err);
/* Rank and merged id of the pair (left, right); 0 if no such rule. */
int sotto_tok_merge_lookup(const sotto_tokenizer *tok, int32_t left, int32_t right,
                           int32_t *rank, int32_t *merged);

#endif
