/* repetition.h - a detector of decoding loops on token ids.
 *
 * Whisper's best-known failure is a phrase repeated until the token limit
 * ("I am not sure if I can. I am not sure if I can. ..."). The zlib
 * compression ratio catches long loops in long text; this catches them
 * early and in short text, on the tokens themselves. Pure logic, no model.
 *
 * Only text tokens count (ids below `eot`): timestamp tokens between the
 * copies of a loop differ from copy to copy, so they are skipped. Two rules:
 *   - consecutive copies: a pattern of p tokens (1 <= p <= 48) directly
 *     repeated c >= 3 times in a row, covering c * p >= 9 tokens. So a
 *     phrase of 3+ tokens said three times ("I think, I think, I think")
 *     counts, "very, very, very" (2 tokens x 3) does not, and a single
 *     token needs 9 copies;
 *   - scattered copies: a run of 8 tokens that occurs 3 times or more
 *     anywhere in the text (loops whose copies drift apart).
 * Natural dictation essentially never meets either rule; a loop meets one
 * within its third copy.
 */
#ifndef SOTTO_REPETITION_H
#define SOTTO_REPETITION_H

#include <stdint.h>

typedef struct sotto_repetition {
    int found;  /* 1 if a loop was found */
    int at;     /* index into the tokens where the first repeated copy
                   begins: tokens[0..at) are the text before the loop plus
                   its first copy, the part worth keeping */
    int period; /* pattern length in text tokens (the scattered rule: 8) */
    int copies; /* copies seen */
} sotto_repetition;

/* Scans tokens[0..n) with both rules; fills *r and returns r->found. */
int sotto_repetition_find(const int32_t *tokens, int n, int32_t eot, sotto_repetition *r);

/* The consecutive rule only, for loops that end at the last token: cheap
 * enough to call after every generated token (O(48 + loop length)).
 * Returns 1 if tokens[0..n) ends in a loop. */
int sotto_repetition_tail(const int32_t *tokens, int n, int32_t eot);

/* The word-level twin, on decoded text, for loops whose copies differ in
 * their tokens ("how much they were thinking of. How much they were
 * thinking of. How much ..."): a phrase of SOTTO_WORD_LOOP_N words (ASCII
 * case and punctuation ignored; words are runs of letters, digits,
 * apostrophes and non-ASCII bytes, and a contraction is two: "I" "'m")
 * three times, each copy starting at most
 * SOTTO_WORD_LOOP_GAP words after the one before. Returns 1 if found, with
 * *second_word the index of the word that begins the second copy (the
 * words before it are worth keeping). Looks at the first 512 words. */
#define SOTTO_WORD_LOOP_N 4
#define SOTTO_WORD_LOOP_GAP 16
int sotto_repetition_find_words(const char *text, int *second_word);
/* The same, with the word indices where the three copies begin. */
int sotto_repetition_find_word_copies(const char *text, int starts[3]);

/* Words of text as sotto_repetition_find_words counts them. */
int sotto_repetition_count_words(const char *text);

#endif
