/* fuzz_ct2.c - the CTranslate2 model.bin reader (engine/load_ct2.c) through
 * sotto_model_load: a private model directory holding a tiny
 * vocabulary.txt and the input as model.bin. It must load or fail cleanly,
 * never read out of bounds or allocate without bound. */
#include "fuzz_util.h"
#include "whisper.h"

#include <stdint.h>

static const char k_vocab[] =
    "a\nb\nc\n\xc4\xa0the\n<|endoftext|>\n<|startoftranscript|>\n<|en|>\n<|translate|>\n"
    "<|transcribe|>\n<|startoflm|>\n<|startofprev|>\n<|nocaptions|>\n<|notimestamps|>\n<|0.00|>\n";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static int ready;
    if (!ready) {
        fuzz_write("vocabulary.txt", k_vocab, sizeof k_vocab - 1);
        ready = 1;
    }
    fuzz_write("model.bin", data, size);
    sotto_err err;
    sotto_model *m = sotto_model_load(fuzz_dir(), NULL, &err);
    sotto_model_free(m);
    return 0;
}
