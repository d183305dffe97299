/* tokenizer.h - Whisper's byte-level BPE tokenizer (GPT-2 style).
 *
 * Loaded from the files of a model directory, in this order of preference:
 *   1. tokenizer.json            (Hugging Face "tokenizers" format: model.vocab,
 *                                 model.merges, added_tokens)
 *   2. vocab.json + merges.txt   (+ added_tokens.json and/or special tokens
 *                                 listed in tokenizer_config.json, if present)
 *   3. vocabulary.txt / vocabulary.json (CTranslate2: one token per id, in id
 *                                 order). Decode-only: no merges, so
 *                                 sotto_tokenizer_can_encode() returns 0.
 * vocabulary.txt, when present, also supplies tokens past the end of the
 * tokenizer.json vocabulary (CTranslate2 appends the timestamp tokens
 * "<|0.00|>".."<|30.00|>").
 *
 * Token strings are stored in their byte-level form ("Ġthe"); decoding maps
 * them back to raw bytes with the inverse of GPT-2's bytes_to_unicode table.
 * Special tokens (added tokens marked special, e.g. "<|endoftext|>") are
 * looked up by name and never produce text when decoding.
 *
 * Ownership: the tokenizer owns all its strings; pointers it returns stay
 * valid until sotto_tokenizer_free(). A loaded tokenizer is immutable and
 * may be shared by any number of threads.
 */
#ifndef SOTTO_TOKENIZER_H
#define SOTTO_TOKENIZER_H

#include "sotto_err.h"

#include <stddef.h>
#include <stdint.h>

typedef struct sotto_tokenizer sotto_tokenizer;

/* Loads the tokenizer of a model directory (see above). NULL + err on failure;
 * errors name the file and the problem. */
sotto_tokenizer *sotto_tokenizer_load_dir(const char *dir, sotto_err *err);
void sotto_tokenizer_free(sotto_tokenizer *tok); /* accepts NULL */

/* Number of ids known: 1 + the largest id of any token. */
int32_t sotto_tokenizer_n_vocab(const sotto_tokenizer *tok);

/* Id of the token whose string is exactly `token` (byte-level form for BPE
 * tokens, e.g. "Ġthe"; literal for specials, e.g. "<|en|>"); -1 if absent. */
int32_t sotto_tokenizer_token_id(const sotto_tokenizer *tok, const char *token);

/* Token string of `id` in its stored form; NULL if id is unknown. */
const char *sotto_tokenizer_token_str(const sotto_tokenizer *tok, int32_t id);

/* 1 if `id` is a special (added, special=true) token, else 0. */
int sotto_tokenizer_is_special(const sotto_tokenizer *tok, int32_t id);

/* Raw bytes of a non-special token (may be a fragment of a UTF-8 character).
 * Returns SOTTO_E_NOTFOUND for unknown ids and SOTTO_E_INVALID for specials.
 * *bytes points into the tokenizer. */
int sotto_tokenizer_token_bytes(const sotto_tokenizer *tok, int32_t id,
                                const unsigned char **bytes, size_t *len);

/* 1 if merges were loaded, so that encoding is possible. */
int sotto_tokenizer_can_encode(const sotto_tokenizer *tok);

/* Encodes UTF-8 text (no special-token parsing; "<|en|>" is plain text) with
 * GPT-2's pre-tokenizer regex and the BPE merges, exactly as the Hugging Face
 * tokenizer does with add_special_tokens=False. Writes up to `cap` ids to
 * `out` and the total count to *n_out; returns SOTTO_E_RANGE if cap was too
 * small (with *n_out = the count needed), SOTTO_E_UNSUPPORTED if the
 * tokenizer cannot encode, SOTTO_E_FORMAT for invalid UTF-8 input. */
int sotto_tokenizer_encode(const sotto_tokenizer *tok, const char *text, size_t len,
                           int32_t *out, size_t cap, size_t *n_out, sotto_err *err);

/* Decodes ids to a malloc'd NUL-terminated UTF-8 string (caller frees).
 * Special tokens and unknown ids are skipped. Byte sequences that are not
 * valid UTF-8 are replaced by U+FFFD, as Python's errors="replace" does.
 * NULL + err on allocation failure. */
char *sotto_tokenizer_decode(const sotto_tokenizer *tok, const int32_t *ids, size_t n,
                             sotto_err *err);

#endif
