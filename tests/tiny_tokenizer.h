/* tiny_tokenizer.h - tiny.en's tokenizer for C unit tests that need real
 * token ids ($SOTTO_SOURCE_DIR/models/tiny.en, else ./models/tiny.en).
 * Include after check.h; a failure to load is a recorded CHECK failure. */
#ifndef SOTTO_TINY_TOKENIZER_H
#define SOTTO_TINY_TOKENIZER_H

#include "tokenizer.h"

#include <stdio.h>
#include <stdlib.h>

static sotto_tokenizer *load_tok(void) {
    const char *src = getenv("SOTTO_SOURCE_DIR");
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/models/tiny.en", src && *src ? src : ".");
    sotto_err err = {0};
    sotto_tokenizer *tok = sotto_tokenizer_load_dir(dir, &err);
    CHECK_MSG(tok != NULL, "cannot load the tokenizer of %s: %s", dir, err.msg);
    return tok;
}

#endif
