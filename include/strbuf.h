/* strbuf.h - a growable text buffer for building responses.
 *
 * Ownership: the buffer owns `p` until sotto_sb_take() hands it to the
 * caller; sotto_sb_free() frees it otherwise. After an allocation failure
 * every later append is ignored and `failed` stays set.
 */
#ifndef SOTTO_STRBUF_H
#define SOTTO_STRBUF_H

#include <stddef.h>

typedef struct sotto_sb {
    char *p;   /* NUL-terminated once anything was appended */
    size_t len, cap;
    int failed;
} sotto_sb;

void sotto_sb_printf(sotto_sb *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void sotto_sb_put(sotto_sb *b, const char *s, size_t n);
/* The text (malloc'd, "" when empty) and its length; NULL after a failure
 * (the buffer is freed either way). */
char *sotto_sb_take(sotto_sb *b, size_t *len);
void sotto_sb_free(sotto_sb *b);

#endif
