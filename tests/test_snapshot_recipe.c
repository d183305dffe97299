/* test_snapshot_recipe.c - the snapshot recipe reader's error paths, which
 * fuzz/fuzz_snapshot.c found broken: a recipe of another version was
 * reported after its JSON was freed (a use-after-free, caught by ASan), and
 * a bad policy's message was formatted from err->msg into itself. */
#define _POSIX_C_SOURCE 200809L
#include "check.h"
#include "log.h"
#include "model.h"
#include "snapshot.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char g_dir[64];

static int read_recipe(const char *json, sotto_err *err) {
    char path[128];
    snprintf(path, sizeof path, "%s/%s", g_dir, SOTTO_SNAPSHOT_RECIPE);
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    if (!f) return SOTTO_E_IO;
    fputs(json, f);
    fclose(f);
    sotto_model *m = calloc(1, sizeof *m);
    m->params = sotto_model_default_params();
    m->policy = sotto_policy_uniform(SOTTO_WFMT_F32);
    cJSON *recipe = NULL;
    int rc = sotto_snapshot_read_recipe(m, g_dir, &recipe, err);
    cJSON_Delete(recipe);
    free(m);
    unlink(path);
    return rc;
}

int main(void) {
    snprintf(g_dir, sizeof g_dir, "/tmp/sotto_recipe_XXXXXX");
    if (!mkdtemp(g_dir)) return perror("mkdtemp"), 1;
    sotto_log_set_level(SOTTO_LOG_ERROR);
    sotto_err err;
    CHECK_EQ_INT(read_recipe("{\"format\":\"sotto-quantized-whisper\",\"version\":2,"
                             "\"policy\":\"all=nf4\",\"tensors\":{}}", &err),
                 SOTTO_E_UNSUPPORTED);
    CHECK_MSG(strstr(err.msg, "recipe version 2 (this sotto reads 1)") != NULL, "%s", err.msg);
    CHECK_EQ_INT(read_recipe("{\"format\":\"sotto-quantized-whisper\",\"version\":1,"
                             "\"policy\":\"encoder=zz\",\"tensors\":{}}", &err), SOTTO_E_INVALID);
    CHECK_MSG(strstr(err.msg, SOTTO_SNAPSHOT_RECIPE) != NULL && strstr(err.msg, "zz") != NULL,
              "%s", err.msg);
    CHECK_EQ_INT(read_recipe("{\"format\":\"sotto-quantized-whisper\",\"version\":1,"
                             "\"policy\":\"all=nf4\",\"tensors\":{}}", &err), SOTTO_OK);
    rmdir(g_dir);
    return check_report();
}
