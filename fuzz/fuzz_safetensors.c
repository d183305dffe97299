/* fuzz_safetensors.c - the safetensors reader (common/safetensors.c) on
 * arbitrary bytes, from memory: open, then every tensor the header lists;
 * each one returned must lie inside the input (ASan checks the reads). */
#include "safetensors.h"

#include "log.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static int quiet;
    if (!quiet) sotto_log_set_level(SOTTO_LOG_ERROR), quiet = 1;
    sotto_mapfile map = {size ? data : NULL, size};
    sotto_st_file f;
    sotto_err err;
    if (sotto_st_open(&f, "fuzz.safetensors", &map, &err) != SOTTO_OK) return 0;
    const cJSON *item;
    cJSON_ArrayForEach(item, f.header) {
        if (!item->string || !strcmp(item->string, "__metadata__")) continue;
        sotto_st_tensor t;
        if (sotto_st_item(&f, item, &t, &err) != SOTTO_OK) continue;
        const uint8_t *p = t.data;
        if (t.nbytes && (p < data || p + t.nbytes > data + size)) abort();
        volatile uint8_t x = t.nbytes ? (uint8_t)(p[0] ^ p[t.nbytes - 1]) : 0;
        (void)x;
        sotto_st_tensor g; /* by name: the first of duplicated names, also in bounds */
        if (sotto_st_get(&f, item->string, &g, &err) == SOTTO_OK && g.nbytes &&
            ((const uint8_t *)g.data < data || (const uint8_t *)g.data + g.nbytes > data + size))
            abort();
    }
    sotto_st_close(&f);
    return 0;
}
