/* fuzz_tokenizer.c - the tokenizer loaders (engine/tokenizer_load.c) on
 * arbitrary files. Byte 0 picks the layout: tokenizer.json; vocab.json +
 * merges.txt (split at the first NUL byte); vocabulary.txt; vocabulary.json.
 * A tokenizer that loads must then encode and decode a sentence. */
#include "fuzz_util.h"
#include "tokenizer.h"

#include <stdint.h>

static const char *const k_files[] = {"tokenizer.json", "vocab.json", "merges.txt",
                                      "vocabulary.txt", "vocabulary.json"};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    for (size_t i = 0; i < sizeof k_files / sizeof k_files[0]; i++) fuzz_remove(k_files[i]);
    int kind = data[0] % 4;
    data++, size--;
    if (kind == 0) {
        fuzz_write("tokenizer.json", data, size);
    } else if (kind == 1) {
        const uint8_t *nul = memchr(data, 0, size);
        size_t a = nul ? (size_t)(nul - data) : size;
        fuzz_write("vocab.json", data, a);
        fuzz_write("merges.txt", nul ? nul + 1 : data + size, nul ? size - a - 1 : 0);
    } else {
        fuzz_write(kind == 2 ? "vocabulary.txt" : "vocabulary.json", data, size);
    }
    sotto_err err;
    sotto_tokenizer *tok = sotto_tokenizer_load_dir(fuzz_dir(), &err);
    if (!tok) return 0;
    int32_t n = sotto_tokenizer_n_vocab(tok);
    for (int32_t id = 0; id < n && id < 64; id++) (void)sotto_tokenizer_token_str(tok, id);
    if (sotto_tokenizer_can_encode(tok)) {
        static const char text[] = " Hello, world! caf\xc3\xa9 \xe2\x80\x94 1234";
        int32_t ids[256];
        size_t k = 0;
        if (sotto_tokenizer_encode(tok, text, sizeof text - 1, ids, 256, &k, &err) == SOTTO_OK) {
            for (size_t i = 0; i < k; i++)
                if (ids[i] < 0 || ids[i] >= n) abort();
            free(sotto_tokenizer_decode(tok, ids, k, &err));
        }
    }
    sotto_tokenizer_free(tok);
    return 0;
}
