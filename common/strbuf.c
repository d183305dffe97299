/* strbuf.c - see strbuf.h. */
#include "strbuf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int grow(sotto_sb *b, size_t need) {
    if (b->failed) return -1;
    if (b->len + need + 1 <= b->cap) return 0;
    size_t cap = (b->len + need + 1) * 2;
    if (cap < 256) cap = 256;
    char *np = realloc(b->p, cap);
    if (!np) {
        b->failed = 1;
        return -1;
    }
    b->p = np;
    b->cap = cap;
    return 0;
}

void sotto_sb_put(sotto_sb *b, const char *s, size_t n) {
    if (grow(b, n)) return;
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

void sotto_sb_printf(sotto_sb *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0) {
        b->failed = 1;
        return;
    }
    if (grow(b, (size_t)n)) return;
    va_start(ap, fmt);
    vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

char *sotto_sb_take(sotto_sb *b, size_t *len) {
    if (!b->failed && !b->p && grow(b, 0) == 0) b->p[0] = '\0';
    char *p = b->failed ? NULL : b->p;
    if (!p) free(b->p);
    if (len) *len = p ? b->len : 0;
    memset(b, 0, sizeof *b);
    return p;
}

void sotto_sb_free(sotto_sb *b) {
    free(b->p);
    memset(b, 0, sizeof *b);
}
