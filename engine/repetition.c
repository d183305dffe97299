/* repetition.c - decoding-loop detector (see repetition.h). */
#include "repetition.h"

#include <ctype.h>

#include <string.h>

#define MAX_PERIOD 48
#define MIN_COPIES 3
#define MIN_SPAN 9     /* copies * period */
#define GRAM 8         /* the scattered rule's run length */
#define SCAN_MAX 1024  /* longer inputs: the last SCAN_MAX tokens are scanned */

/* Text tokens of tokens[0..n) into t[], their indices into idx[]. */
static int text_tokens(const int32_t *tokens, int n, int32_t eot, int32_t *t, int *idx) {
    int from = n > SCAN_MAX ? n - SCAN_MAX : 0, m = 0;
    for (int i = from; i < n; i++)
        if (tokens[i] < eot) {
            t[m] = tokens[i];
            idx[m++] = i;
        }
    return m;
}

static int loop_enough(int copies, int period) {
    return copies >= MIN_COPIES && copies * period >= MIN_SPAN;
}

int sotto_repetition_find(const int32_t *tokens, int n, int32_t eot, sotto_repetition *r) {
    int32_t t[SCAN_MAX];
    int idx[SCAN_MAX];
    memset(r, 0, sizeof *r);
    r->at = -1;
    const int m = text_tokens(tokens, n, eot, t, idx);
    int best_at = -1, best_p = 0, best_c = 0;
    /* consecutive copies: t[i] == t[i + p] over a run of (copies - 1) * p */
    for (int p = 1; p <= MAX_PERIOD && p < m; p++) {
        int run = 0;
        for (int i = 0; i + p < m; i++) {
            run = t[i] == t[i + p] ? run + 1 : 0;
            int copies = 1 + run / p;
            if (run >= p && loop_enough(copies, p)) {
                int at = i - run + 1 + p; /* the first repeated copy */
                if (best_at < 0 || at < best_at) best_at = at, best_p = p, best_c = copies;
                break;
            }
        }
    }
    /* scattered copies of a GRAM-token run */
    if (m >= GRAM * MIN_COPIES) {
        uint32_t h[SCAN_MAX];
        for (int i = 0; i + GRAM <= m; i++) {
            uint32_t x = 2166136261u;
            for (int k = 0; k < GRAM; k++) x = (x ^ (uint32_t)t[i + k]) * 16777619u;
            h[i] = x;
        }
        for (int i = 0; i + GRAM <= m; i++) {
            if (best_at >= 0 && i >= best_at) break; /* cannot start earlier */
            int copies = 1, next = i + GRAM, second = -1;
            for (int j = next; j + GRAM <= m; j++) {
                if (h[j] != h[i] || memcmp(t + i, t + j, sizeof(int32_t) * GRAM)) continue;
                if (second < 0) second = j;
                copies++;
                j += GRAM - 1; /* copies do not overlap */
                if (copies >= MIN_COPIES) break;
            }
            if (copies >= MIN_COPIES) {
                if (best_at < 0 || second < best_at) best_at = second, best_p = GRAM, best_c = copies;
                break;
            }
        }
    }
    if (best_at < 0) return 0;
    r->found = 1;
    r->at = best_at < m ? idx[best_at] : n;
    r->period = best_p;
    r->copies = best_c;
    return 1;
}

int sotto_repetition_tail(const int32_t *tokens, int n, int32_t eot) {
    int32_t t[SCAN_MAX];
    int idx[SCAN_MAX];
    const int m = text_tokens(tokens, n, eot, t, idx);
    for (int p = 1; p <= MAX_PERIOD && 2 * p < m; p++) {
        int run = 0;
        while (m - 1 - run - p >= 0 && t[m - 1 - run] == t[m - 1 - run - p]) run++;
        if (run >= p && loop_enough(1 + run / p, p)) return 1;
    }
    return 0;
}

/* ---- the word rule --------------------------------------------------------------- */

#define WLOOP_MAX 512 /* words examined */

static int is_word_byte(unsigned char c) { return isalnum(c) || c >= 0x80 || c == '\''; }

/* Word starts and lengths of text (at most max); returns the count. A
 * contraction is two words ("I'm" is "I" "'m", "don't" "don" "'t"), as
 * Whisper's English normalizer (and so the loop count of the benchmarks)
 * makes it "i am", "do not": "I'm going to" three times is a loop of four
 * words. */
static int split_words(const char *text, const char **w, int *len, int max) {
    int n = 0;
    for (const char *p = text; *p && n < max;) {
        while (*p && !is_word_byte((unsigned char)*p)) p++;
        if (!*p) break;
        const char *q = p + 1;
        while (*q && is_word_byte((unsigned char)*q) &&
               !(*q == '\'' && isalnum((unsigned char)q[-1]) && isalpha((unsigned char)q[1])))
            q++;
        if (w) w[n] = p, len[n] = (int)(q - p);
        n++;
        p = q;
    }
    return n;
}

int sotto_repetition_count_words(const char *text) {
    return text ? split_words(text, NULL, NULL, 1 << 30) : 0;
}

static int same_word(const char *a, int la, const char *b, int lb) {
    if (la != lb) return 0;
    for (int i = 0; i < la; i++)
        if (tolower((unsigned char)a[i]) != tolower((unsigned char)b[i])) return 0;
    return 1;
}

int sotto_repetition_find_words(const char *text, int *second_word) {
    int starts[3];
    int found = sotto_repetition_find_word_copies(text, starts);
    if (found && second_word) *second_word = starts[1];
    return found;
}

int sotto_repetition_find_word_copies(const char *text, int starts[3]) {
    const char *w[WLOOP_MAX];
    int len[WLOOP_MAX];
    const int N = SOTTO_WORD_LOOP_N;
    int nw = text ? split_words(text, w, len, WLOOP_MAX) : 0;
    for (int i = 0; i + N <= nw; i++) {
        int copies = 1, last = i, at[3] = {i, -1, -1};
        for (int j = i + 1; j + N <= nw && j - last <= SOTTO_WORD_LOOP_GAP && copies < 3; j++) {
            int k = 0;
            while (k < N && same_word(w[i + k], len[i + k], w[j + k], len[j + k])) k++;
            if (k < N) continue;
            at[copies++] = j;
            last = j;
        }
        if (copies >= 3) {
            for (int c = 0; c < 3; c++) starts[c] = at[c];
            return 1;
        }
    }
    return 0;
}
