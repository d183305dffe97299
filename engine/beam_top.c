/* beam_top.c - a beam-search step's best candidates (beam_top.h). */
#include "beam_top.h"

#include <math.h>
#include <stddef.h>

/* Inserts into the c best kept in descending order: an equal score goes
 * after those already there, and a full list takes only a strictly better
 * one, so that earlier candidates win ties. */
static void push(sotto_beam_cand *top, int *n, int c, float score, int beam, int32_t tok) {
    if (*n == c && !(score > top[c - 1].score)) return;
    int i = *n < c ? (*n)++ : c - 1;
    while (i > 0 && top[i - 1].score < score) {
        top[i] = top[i - 1];
        i--;
    }
    top[i] = (sotto_beam_cand){score, beam, tok};
}

int sotto_beam_row_top(const float *logp, int n_vocab, float cum, int beam, int c, sotto_beam_cand *top) {
    int n = 0;
    for (int v = 0; v < n_vocab; v++)
        if (logp[v] > -INFINITY) push(top, &n, c, cum + logp[v], beam, v);
    return n;
}

int sotto_beam_merge(const sotto_beam_cand *rows, const int *n, int n_rows, int c, sotto_beam_cand *top) {
    int k = 0;
    for (int b = 0; b < n_rows; b++)
        for (int i = 0; i < n[b]; i++) {
            const sotto_beam_cand *r = &rows[(size_t)b * c + i];
            push(top, &k, c, r->score, r->beam, r->tok);
        }
    return k;
}
