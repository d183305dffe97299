/* test_agreement.c - the LocalAgreement commit policy on token sequences. */
#include "agreement.h"
#include "check.h"

static int update(sotto_agreement *a, const int32_t *h, int n) {
    int k = -1;
    CHECK(sotto_agreement_update(a, h, n, &k) == SOTTO_OK);
    return k;
}

int main(void) {
    sotto_agreement a;
    CHECK(sotto_agreement_init(&a, 0) == SOTTO_E_INVALID);
    CHECK(sotto_agreement_init(&a, SOTTO_AGREEMENT_MAX_N + 1) == SOTTO_E_INVALID);
    CHECK(sotto_agreement_init(&a, 2) == SOTTO_OK);

    /* pass 1: nothing can be committed yet */
    int32_t p1[] = {10, 11, 12};
    CHECK_EQ_INT(update(&a, p1, 3), 0);
    /* pass 2 agrees on two tokens, then revises the third */
    int32_t p2[] = {10, 11, 99, 13};
    CHECK_EQ_INT(update(&a, p2, 4), 2);
    /* pass 3 is relative to the new prefix [10 11]: it agrees with pass 2's
     * remainder [99 13] on 99 only */
    int32_t p3[] = {99, 14};
    CHECK_EQ_INT(update(&a, p3, 2), 1);
    /* pass 4 (after [10 11 99]): agrees with [14] */
    int32_t p4[] = {14, 15, 16};
    CHECK_EQ_INT(update(&a, p4, 3), 1);
    /* an empty hypothesis commits nothing and is held */
    CHECK_EQ_INT(update(&a, NULL, 0), 0);
    CHECK_EQ_INT(update(&a, p4, 3), 0);
    /* reset: a new utterance starts over */
    sotto_agreement_reset(&a);
    CHECK_EQ_INT(update(&a, p1, 3), 0);
    CHECK_EQ_INT(update(&a, p1, 3), 3);

    /* LocalAgreement-3 needs three passes */
    CHECK(sotto_agreement_init(&a, 3) == SOTTO_OK);
    CHECK_EQ_INT(update(&a, p2, 4), 0);
    CHECK_EQ_INT(update(&a, p2, 4), 0);
    CHECK_EQ_INT(update(&a, p1, 3), 2);

    /* n = 1 commits every pass whole */
    CHECK(sotto_agreement_init(&a, 1) == SOTTO_OK);
    CHECK_EQ_INT(update(&a, p2, 4), 4);

    /* hypotheses longer than the cap are cut, not overrun */
    static int32_t big[SOTTO_AGREEMENT_MAX_TOKENS + 50];
    for (int i = 0; i < SOTTO_AGREEMENT_MAX_TOKENS + 50; i++) big[i] = i;
    CHECK(sotto_agreement_init(&a, 2) == SOTTO_OK);
    CHECK_EQ_INT(update(&a, big, SOTTO_AGREEMENT_MAX_TOKENS + 50), 0);
    CHECK_EQ_INT(update(&a, big, SOTTO_AGREEMENT_MAX_TOKENS + 50), SOTTO_AGREEMENT_MAX_TOKENS);
    int k;
    CHECK(sotto_agreement_update(&a, NULL, 3, &k) == SOTTO_E_INVALID);
    return check_report();
}
