/* agreement.h - the streaming commit policy: LocalAgreement-n.
 *
 * While a person speaks, the growing audio window is decoded again and
 * again, each pass with the already committed tokens as a forced prefix.
 * A pass's hypothesis (the tokens after that prefix) is tentative. A token
 * is committed, and never changes again, once the last n passes agree on
 * it: the longest common prefix of the last n hypotheses is committed.
 *
 * Pure logic over token ids, no audio and no model: the state keeps the
 * previous n - 1 hypotheses, re-expressed after each commit relative to the
 * new prefix. The caller owns the hypotheses it passes in.
 */
#ifndef SOTTO_AGREEMENT_H
#define SOTTO_AGREEMENT_H

#include "sotto_err.h"

#include <stdint.h>

#define SOTTO_AGREEMENT_MAX_N 4
#define SOTTO_AGREEMENT_MAX_TOKENS 448

typedef struct sotto_agreement {
    int n; /* passes that must agree (2 = LocalAgreement-2); 1 commits every pass */
    int count; /* hypotheses held (< n) */
    int len[SOTTO_AGREEMENT_MAX_N];
    int32_t hyp[SOTTO_AGREEMENT_MAX_N][SOTTO_AGREEMENT_MAX_TOKENS];
} sotto_agreement;

/* n in 1..SOTTO_AGREEMENT_MAX_N; SOTTO_E_INVALID otherwise. */
int sotto_agreement_init(sotto_agreement *a, int n);

/* Forgets the held hypotheses (new utterance). */
void sotto_agreement_reset(sotto_agreement *a);

/* Adds a pass's hypothesis hyp[0..len) (tokens after the committed
 * prefix; longer hypotheses are cut at SOTTO_AGREEMENT_MAX_TOKENS) and sets
 * *n_commit to how many of its leading tokens are now committed: the common
 * prefix of this and the previous n - 1 hypotheses. The held hypotheses are
 * shifted by *n_commit so that the next pass can be compared against them. */
int sotto_agreement_update(sotto_agreement *a, const int32_t *hyp, int len, int *n_commit);

#endif
