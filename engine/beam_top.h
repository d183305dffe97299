/* beam_top.h - a beam-search step's best candidates (engine/generate.c).
 *
 * Each live beam b has a row of log-probabilities over the vocabulary and a
 * cumulative score cum[b]; a candidate (b, v) scores cum[b] + logp[b][v].
 * The step keeps the c best, in descending score, ties broken by the lower
 * flat index (lower beam, then lower token): the order of one pass over all
 * (beam, token) that keeps a candidate only when it strictly beats the c-th.
 * Entries that are -Inf or NaN are never candidates.
 *
 * To run beams in parallel, the work is split: sotto_beam_row_top takes one
 * row's best c (call it for rows in any order, on any thread), and
 * sotto_beam_merge merges the rows' lists in beam order, which gives exactly
 * the single-pass result (tests/test_beam_top.c holds it to a sort of all
 * candidates). Pure logic on caller-owned arrays; nothing is allocated. */
#ifndef SOTTO_BEAM_TOP_H
#define SOTTO_BEAM_TOP_H

#include <stdint.h>

typedef struct sotto_beam_cand {
    float score;
    int beam;
    int32_t tok;
} sotto_beam_cand;

/* Row `beam`'s best c candidates (cum + logp[v]) into top[0..c), descending;
 * returns how many (fewer than c when the row has fewer finite entries). */
int sotto_beam_row_top(const float *logp, int n_vocab, float cum, int beam, int c, sotto_beam_cand *top);

/* Merges n_rows lists (row b's n[b] candidates at rows + b * c, as
 * sotto_beam_row_top left them) into the best c overall, into top[0..c);
 * returns how many. */
int sotto_beam_merge(const sotto_beam_cand *rows, const int *n, int n_rows, int c, sotto_beam_cand *top);

#endif
