/* fuzz_snapshot.c - the snapshot recipe reader (engine/snapshot.c): the input
 * as sotto_quant.json in a private directory, read for a model that asked
 * for nothing and for one that asked for nf4; then every tensor the recipe
 * lists is checked against a few bytes (its CRC-32). */
#include "fuzz_util.h"
#include "model.h"
#include "snapshot.h"

#include <stdint.h>

static void one(const uint8_t *data, size_t size, int ask_nf4) {
    sotto_model *m = calloc(1, sizeof *m);
    if (!m) abort();
    m->params = sotto_model_default_params();
    if (ask_nf4) m->params.weights = SOTTO_WFMT_NF4;
    m->policy = sotto_policy_uniform(ask_nf4 ? SOTTO_WFMT_NF4 : SOTTO_WFMT_F32);
    cJSON *recipe = NULL;
    sotto_err err;
    if (sotto_snapshot_read_recipe(m, fuzz_dir(), &recipe, &err) == SOTTO_OK && recipe) {
        const cJSON *ts = cJSON_GetObjectItemCaseSensitive(recipe, "tensors"), *t;
        cJSON_ArrayForEach(t, ts) {
            if (t->string)
                (void)sotto_snapshot_check_tensor(recipe, "model.safetensors", t->string, data,
                                                  size < 16 ? size : 16, &err);
        }
        cJSON_Delete(recipe);
    }
    free(m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_write(SOTTO_SNAPSHOT_RECIPE, data, size);
    one(data, size, 0);
    one(data, size, 1);
    return 0;
}
