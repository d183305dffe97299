/* test_beam_top.c - a beam-search step's candidates (engine/beam_top.h):
 * rows taken one by one, in any order, then merged, against the
 * specification: all (beam, token) with a finite log-probability, sorted by
 * score descending, ties by the lower beam then the lower token, the first c.
 * Scores come from a handful of values so that ties are everywhere (within a
 * row, across rows, at the c-th place); -Inf and NaN entries are never
 * candidates; rows with fewer finite entries than c, and no finite entry at
 * all, are covered. */
#include "beam_top.h"
#include "check.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static unsigned g_seed = 99;
static unsigned rnd(void) {
    g_seed = g_seed * 1103515245u + 12345u;
    return (g_seed >> 16) & 0x7fff;
}

static int cmp_spec(const void *a, const void *b) {
    const sotto_beam_cand *x = a, *y = b;
    if (x->score != y->score) return x->score > y->score ? -1 : 1;
    if (x->beam != y->beam) return x->beam < y->beam ? -1 : 1;
    return (x->tok > y->tok) - (x->tok < y->tok);
}

static void check_case(int B, int V, int c, int n_levels, int sparse) {
    float *lp = malloc(sizeof(float) * (size_t)B * V), cum[16];
    sotto_beam_cand *all = malloc(sizeof *all * (size_t)B * V), *rows = malloc(sizeof *rows * (size_t)B * c),
                    *top = malloc(sizeof *top * (size_t)c);
    int n[16], n_all = 0;
    for (int b = 0; b < B; b++) {
        cum[b] = -(float)(rnd() % 3) * 0.5f;
        for (int v = 0; v < V; v++) {
            unsigned r = rnd() % 100;
            float x = -(float)(rnd() % n_levels) * 0.5f;
            if (r < (unsigned)sparse) x = -INFINITY;
            else if (r < (unsigned)sparse + 2) x = NAN;
            lp[(size_t)b * V + v] = x;
            if (x > -INFINITY) all[n_all++] = (sotto_beam_cand){cum[b] + x, b, v};
        }
    }
    qsort(all, (size_t)n_all, sizeof *all, cmp_spec);
    /* rows in reverse order, as threads may finish them */
    for (int b = B - 1; b >= 0; b--) n[b] = sotto_beam_row_top(lp + (size_t)b * V, V, cum[b], b, c, rows + (size_t)b * c);
    int k = sotto_beam_merge(rows, n, B, c, top);
    int want = n_all < c ? n_all : c, same = k == want;
    for (int i = 0; same && i < k; i++)
        same = top[i].score == all[i].score && top[i].beam == all[i].beam && top[i].tok == all[i].tok;
    CHECK_MSG(same, "B=%d V=%d c=%d levels=%d sparse=%d%%: %d candidates (want %d), or not the sorted ones", B, V,
              c, n_levels, sparse, k, want);
    free(lp);
    free(all);
    free(rows);
    free(top);
}

int main(void) {
    const int Bs[] = {1, 2, 5, 8};
    for (size_t i = 0; i < sizeof Bs / sizeof Bs[0]; i++) {
        const int B = Bs[i], c = 2 * B;
        for (int rep = 0; rep < 20; rep++) {
            check_case(B, 64, c, 2, 0);    /* two values: ties at every place */
            check_case(B, 64, c, 5, 30);   /* some -Inf and NaN */
            check_case(B, 300, c, 50, 10); /* fewer ties */
            check_case(B, 7, c, 3, 80);    /* rows with fewer finite entries than c */
            check_case(B, 5, c, 2, 98);    /* mostly nothing finite */
        }
    }
    /* a row with no finite entry contributes nothing */
    float none[4] = {-INFINITY, NAN, -INFINITY, NAN};
    sotto_beam_cand t[4];
    CHECK_EQ_INT(sotto_beam_row_top(none, 4, 0.0f, 0, 4, t), 0);
    return check_report();
}
