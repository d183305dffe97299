/* test_calib.c - calibration statistics (include/calib.h): recording through
 * the linear-layer observer (exact means on known inputs, every weight of a
 * real transcription), the file round trip and its normalization, 4-bit
 * loads that use it, and the refusals: a second recorder, saving before
 * every weight saw input, a file from another model, a file that lacks a
 * weight, a damaged file. Uses the real tiny.en. */
#include "calib.h"
#include "check.h"
#include "model.h"
#include "safetensors.h"
#include "transcribe.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static sotto_model *load(const char *dir, sotto_wfmt w, int search, const char *calib,
                         sotto_err *err) {
    sotto_model_params p = sotto_model_default_params();
    p.weights = w;
    p.policy = "uniform"; /* every linear part in w */
    p.scale_search = search;
    p.calib = calib;
    return sotto_model_load(dir, &p, err);
}

/* 1 s of a chirp in noise: enough for the encoder and a few decoder steps. */
static float *test_audio(size_t n) {
    float *x = malloc(sizeof(float) * n);
    uint32_t r = 12345;
    for (size_t i = 0; i < n; i++) {
        r = r * 1664525u + 1013904223u;
        double t = (double)i / 16000.0;
        x[i] = (float)(0.3 * sin(6.283 * (200 + 400 * t) * t) + 0.05 * ((r >> 8) / 8388608.0 - 1));
    }
    return x;
}

static int write_fake(const char *path, const char *model, const char *name, int64_t cols) {
    sotto_err err;
    sotto_st_writer *w = sotto_st_writer_create();
    float *v = calloc((size_t)cols, sizeof(float));
    int rc = !w || !v;
    for (int64_t i = 0; i < cols && !rc; i++) v[i] = 1.0f;
    if (!rc) rc = sotto_st_writer_add(w, name, SOTTO_DT_F32, 1, &cols, v, sizeof(float) * cols, &err);
    if (!rc) rc = sotto_st_writer_meta(w, "sotto_calib", "1", &err);
    if (!rc) rc = sotto_st_writer_meta(w, "model", model, &err);
    if (!rc) rc = sotto_st_writer_meta(w, "clips", "[]", &err);
    if (!rc) rc = sotto_st_writer_write(w, path, &err);
    sotto_st_writer_free(w);
    free(v);
    return rc;
}

static void test_record_and_use(const char *dir, const char *tmp) {
    sotto_err err;
    sotto_model *m = load(dir, SOTTO_WFMT_F32, 0, NULL, &err);
    CHECK_MSG(m != NULL, "%s", err.msg);
    if (!m) return;
    sotto_calib_rec *rec = sotto_calib_rec_start(m, &err);
    CHECK_MSG(rec != NULL, "%s", err.msg);
    if (!rec) goto out;
    CHECK(sotto_calib_rec_start(m, &err) == NULL && err.code == SOTTO_E_INVALID);

    /* known input: rows of 1 and 3 -> mean square 5 in every column */
    const int cols = m->hp.n_audio_state, out_rows = m->enc[0].fc1.w.rows;
    float *x = malloc(sizeof(float) * 2 * cols), *y = malloc(sizeof(float) * 2 * out_rows);
    for (int j = 0; j < cols; j++) x[j] = 1.0f, x[cols + j] = 3.0f;
    sotto_linear(&m->enc[0].fc1.w, NULL, x, 2, y);
    CHECK_EQ_INT(sotto_calib_rec_rows(rec, "enc.0.fc1.w"), 2);
    CHECK_EQ_INT(sotto_calib_rec_rows(rec, "enc.0.fc2.w"), 0);
    /* saving now is refused: most weights saw nothing */
    CHECK(sotto_calib_rec_save(rec, tmp, &err) == SOTTO_E_INVALID && strstr(err.msg, "saw no input"));

    /* a real transcription feeds every linear weight */
    size_t n = 16000;
    float *audio = test_audio(n);
    sotto_transcribe_opts o = sotto_transcribe_default_opts();
    sotto_transcript t;
    memset(&t, 0, sizeof t);
    CHECK_MSG(sotto_transcribe(m, audio, n, &o, &t, &err) == 0, "%s", err.msg);
    sotto_transcript_free(&t);
    free(audio);
    CHECK(sotto_calib_rec_rows(rec, "enc.3.fc2.w") >= 1500);
    CHECK(sotto_calib_rec_rows(rec, "dec.0.ck.w") >= 1500 && sotto_calib_rec_rows(rec, "dec.emb") >= 1);
    CHECK_EQ_INT(sotto_calib_rec_add_clip(rec, "/some/dir/chirp.wav", 32044, 0xdeadbeefu, &err), 0);
    CHECK_MSG(sotto_calib_rec_save(rec, tmp, &err) == 0, "%s", err.msg);
    sotto_calib_rec_free(rec);
    /* the observer is gone: linear layers run unobserved again */
    sotto_linear(&m->enc[0].fc1.w, NULL, x, 2, y);
    free(x), free(y);

    sotto_calib *c = sotto_calib_load(tmp, &err);
    CHECK_MSG(c != NULL, "%s", err.msg);
    if (c) {
        const float *v = sotto_calib_get(c, "enc.0.fc1.w", cols);
        CHECK(v != NULL);
        double mean = 0;
        for (int j = 0; v && j < cols; j++) mean += v[j] / cols;
        CHECK_MSG(fabs(mean - 1.01) < 1e-3, "normalized mean %.5f, want 1.01", mean);
        CHECK(sotto_calib_get(c, "enc.0.fc1.w", cols + 1) == NULL);
        CHECK(sotto_calib_get(c, "enc.0.nothing.w", cols) == NULL);
        CHECK(sotto_calib_get(c, "enc.0.fc2.w", m->hp.n_audio_ff) != NULL);
        char want[128];
        sotto_calib_model_string(m, want, sizeof want);
        CHECK_STR(sotto_calib_model(c), want);
        sotto_calib_free(c);
    }
    /* the clip list is in the metadata */
    sotto_mapfile map = {0};
    sotto_st_file f;
    memset(&f, 0, sizeof f);
    if (sotto_mapfile_open(tmp, &map, &err) == 0 && sotto_st_open(&f, tmp, &map, &err) == 0) {
        const cJSON *meta = cJSON_GetObjectItemCaseSensitive(f.header, "__metadata__");
        const cJSON *clips = cJSON_GetObjectItemCaseSensitive(meta, "clips");
        CHECK(cJSON_IsString(clips) && strstr(clips->valuestring, "\"file\":\"chirp.wav\"") &&
              strstr(clips->valuestring, "deadbeef") && strstr(clips->valuestring, "32044"));
    } else {
        CHECK_MSG(0, "%s", err.msg);
    }
    sotto_st_close(&f);
    sotto_mapfile_close(&map);

    /* 4-bit loads with it: other block scales than round to nearest */
    const sotto_wfmt fmts[] = {SOTTO_WFMT_NF4, SOTTO_WFMT_NVFP4};
    for (int i = 0; i < 2; i++) {
        sotto_model *a = load(dir, fmts[i], 0, NULL, &err);
        sotto_model *b = load(dir, fmts[i], 0, tmp, &err);
        CHECK_MSG(b != NULL, "%s: %s", sotto_wfmt_name(fmts[i]), err.msg);
        sotto_model *s = load(dir, fmts[i], 1, NULL, &err);
        CHECK_MSG(s != NULL, "%s: %s", sotto_wfmt_name(fmts[i]), err.msg);
        if (a && b && s) {
            const sotto_wmat *wa = &a->enc[1].fc1.w, *wb = &b->enc[1].fc1.w, *ws = &s->enc[1].fc1.w;
            CHECK(wa->fmt == fmts[i] && wb->fmt == fmts[i]);
            size_t nscales = (size_t)wa->rows * wa->cols / sotto_wfmt_block(fmts[i]);
            size_t sb = fmts[i] == SOTTO_WFMT_NF4 ? nscales * 4 : nscales;
            CHECK_MSG(memcmp(wa->scales, wb->scales, sb) != 0, "%s: calibrated scales equal RTN's",
                      sotto_wfmt_name(fmts[i]));
            CHECK(memcmp(wa->scales, ws->scales, sb) != 0 && memcmp(wb->scales, ws->scales, sb) != 0);
            CHECK(sotto_model_weight_bytes(a) == sotto_model_weight_bytes(b));
        }
        sotto_model_free(a), sotto_model_free(b), sotto_model_free(s);
    }
out:
    sotto_model_free(m);
}

static void test_refusals(const char *dir, const char *tmp) {
    sotto_err err;
    sotto_model *m = load(dir, SOTTO_WFMT_F32, 0, NULL, &err);
    if (!m) return;
    char want[128];
    sotto_calib_model_string(m, want, sizeof want);
    /* another model's statistics */
    CHECK_EQ_INT(write_fake(tmp, "mels 128 width 1280 layers 32+4 vocab 51866", "enc.0.fc1.w", 1280), 0);
    sotto_model *b = load(dir, SOTTO_WFMT_NF4, 0, tmp, &err);
    CHECK(b == NULL && err.code == SOTTO_E_INVALID && strstr(err.msg, "another model"));
    sotto_model_free(b);
    /* this model, but a weight missing */
    CHECK_EQ_INT(write_fake(tmp, want, "enc.0.fc1.w", m->hp.n_audio_state), 0);
    b = load(dir, SOTTO_WFMT_NF4, 0, tmp, &err);
    CHECK(b == NULL && err.code == SOTTO_E_NOTFOUND && strstr(err.msg, "no statistics"));
    sotto_model_free(b);
    /* ... which a float32 load does not need */
    b = load(dir, SOTTO_WFMT_F32, 0, tmp, &err);
    CHECK_MSG(b != NULL, "%s", err.msg);
    sotto_model_free(b);
    /* a file without the calibration tag, a damaged file, no file */
    FILE *f = fopen(tmp, "wb");
    if (f) {
        fputs("\x10\x00\x00\x00\x00\x00\x00\x00{\"a\":1}        ", f);
        fclose(f);
    }
    b = load(dir, SOTTO_WFMT_NF4, 0, tmp, &err);
    CHECK(b == NULL && err.msg[0]);
    sotto_model_free(b);
    f = fopen(tmp, "wb");
    if (f) {
        fputs("garbage", f);
        fclose(f);
    }
    b = load(dir, SOTTO_WFMT_NF4, 0, tmp, &err);
    CHECK(b == NULL && err.msg[0]);
    sotto_model_free(b);
    unlink(tmp);
    b = load(dir, SOTTO_WFMT_NF4, 0, tmp, &err);
    CHECK(b == NULL && err.msg[0]);
    sotto_model_free(b);
    sotto_model_free(m);
}

int main(void) {
    const char *src = getenv("SOTTO_SOURCE_DIR");
    char dir[4096], tmp[256];
    snprintf(dir, sizeof dir, "%s/models/tiny.en", src ? src : ".");
    snprintf(tmp, sizeof tmp, "/tmp/sotto_test_calib_%d.safetensors", (int)getpid());
    test_record_and_use(dir, tmp);
    test_refusals(dir, tmp);
    unlink(tmp);
    return check_report();
}
