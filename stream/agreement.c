/* agreement.c - LocalAgreement-n commit policy (see agreement.h). */
#include "agreement.h"

#include <string.h>

int sotto_agreement_init(sotto_agreement *a, int n) {
    memset(a, 0, sizeof *a);
    if (n < 1 || n > SOTTO_AGREEMENT_MAX_N) return SOTTO_E_INVALID;
    a->n = n;
    return SOTTO_OK;
}

void sotto_agreement_reset(sotto_agreement *a) { a->count = 0; }

int sotto_agreement_update(sotto_agreement *a, const int32_t *hyp, int len, int *n_commit) {
    *n_commit = 0;
    if (len < 0 || (len > 0 && !hyp)) return SOTTO_E_INVALID;
    if (len > SOTTO_AGREEMENT_MAX_TOKENS) len = SOTTO_AGREEMENT_MAX_TOKENS;
    /* newest hypothesis goes last; drop the oldest when n are held */
    if (a->count == a->n) {
        memmove(&a->hyp[0], &a->hyp[1], sizeof a->hyp[0] * (size_t)(a->n - 1));
        memmove(&a->len[0], &a->len[1], sizeof a->len[0] * (size_t)(a->n - 1));
        a->count--;
    }
    if (len) memcpy(a->hyp[a->count], hyp, sizeof(int32_t) * (size_t)len);
    a->len[a->count] = len;
    a->count++;
    if (a->count < a->n) return SOTTO_OK;
    /* common prefix of the n held hypotheses */
    int k = a->len[0];
    for (int i = 1; i < a->count; i++) {
        int j = 0;
        while (j < k && j < a->len[i] && a->hyp[i][j] == a->hyp[0][j]) j++;
        k = j;
    }
    *n_commit = k;
    if (k == 0) return SOTTO_OK;
    /* re-express the held hypotheses after the new prefix */
    for (int i = 0; i < a->count; i++) {
        memmove(a->hyp[i], a->hyp[i] + k, sizeof(int32_t) * (size_t)(a->len[i] - k));
        a->len[i] -= k;
    }
    return SOTTO_OK;
}
