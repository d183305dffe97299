/* test_backend.c - the engine reaches its layers only through the model's
 * backend table (engine/backend.h).
 *
 * A counting backend that forwards to the CPU's entries is put on a CPU
 * model; a whole transcription (beam 5 with temperature fallback: encodes,
 * prompts, steps and the beams' sequence gathers) must then give the CPU's
 * transcript word for word, with every state and call accounted for
 * through the table. Then backends that fail: a state allocation, a decode,
 * an encode; each error comes back with its message, nothing leaks (ASan).
 *
 * Model: $SOTTO_SOURCE_DIR/models/tiny.en. Speech: jfk.wav from
 * $SOTTO_AUDIO_DIR, else $SOTTO_SOURCE_DIR/../shared/audio.
 */
#include "audio.h"
#include "backend.h"
#include "check.h"
#include "threads.h"
#include "transcribe.h"
#include "whisper.h"

#include <stdlib.h>
#include <string.h>

static char g_model[1024], g_wav[1024];

static struct {
    int upload, part_bytes, state_alloc, state_free, fetch, seq_gather, encode, decode, decode_rows;
    int fail_state, fail_decode, fail_encode; /* make that operation fail */
} n;

static size_t c_part_bytes(const sotto_model *m, int part) {
    n.part_bytes++;
    return sotto_backend_cpu.model_part_bytes(m, part) + 7; /* a mark that the table answered */
}
static int c_state_alloc(sotto_state *st, sotto_err *err) {
    n.state_alloc++;
    if (n.fail_state) return sotto_err_set(err, SOTTO_E_NOMEM, "counting backend: no room for a state");
    return sotto_backend_cpu.state_alloc(st, err);
}
static void c_state_free(sotto_state *st) {
    n.state_free++;
    sotto_backend_cpu.state_free(st);
}
static int c_fetch(sotto_state *st, sotto_err *err) {
    (void)st, (void)err;
    n.fetch++;
    return SOTTO_OK;
}
static int c_seq_gather(sotto_state *st, const int *dst, const int *src, const int *lens, int count,
                        sotto_err *err) {
    n.seq_gather++;
    return sotto_backend_cpu.seq_gather(st, dst, src, lens, count, err);
}
static int c_encode(const sotto_model *m, sotto_workspace *ws, sotto_state *const *sts, const float *const *mels,
                    const int *n_ctx, int B, sotto_err *err) {
    n.encode++;
    if (n.fail_encode) return sotto_err_set(err, SOTTO_E_INTERNAL, "counting backend: the encoder failed");
    return sotto_backend_cpu.encode_batch(m, ws, sts, mels, n_ctx, B, err);
}
static int c_decode(const sotto_model *m, sotto_workspace *ws, const sotto_row_ref *rows, int nr, int prompt,
                    float *x, const int *want, int n_want, float *logits, sotto_err *err) {
    n.decode++;
    n.decode_rows += nr;
    if (n.fail_decode && n.decode >= n.fail_decode)
        return sotto_err_set(err, SOTTO_E_INTERNAL, "counting backend: the decoder failed");
    return sotto_backend_cpu.decode(m, ws, rows, nr, prompt, x, want, n_want, logits, err);
}

static const sotto_backend k_counting = {
    .name = "counting",
    .model_upload = NULL,
    .model_free = NULL,
    .model_part_bytes = c_part_bytes,
    .state_alloc = c_state_alloc,
    .state_free = c_state_free,
    .state_fetch_encoder_output = c_fetch,
    .seq_gather = c_seq_gather,
    .encode_batch = c_encode,
    .decode = c_decode,
    .ws_free = NULL,
};

static char *text_of(const sotto_transcript *t) {
    size_t len = 1;
    for (int i = 0; i < t->n_segments; i++) len += strlen(t->segments[i].text);
    char *s = calloc(len, 1);
    for (int i = 0; s && i < t->n_segments; i++) strcat(s, t->segments[i].text);
    return s;
}

static void test_counting(sotto_model *m, const sotto_audio *a) {
    sotto_err err;
    sotto_err_clear(&err);
    sotto_transcribe_opts o = sotto_transcribe_default_opts(); /* beam 5, fallback */
    sotto_transcript ref = {0}, got = {0};
    CHECK_MSG(sotto_transcribe(m, a->samples, a->n, &o, &ref, &err) == 0, "cpu: %s", err.msg);
    CHECK(m->be == &sotto_backend_cpu);
    CHECK_STR(m->be->name, "cpu");

    m->be = &k_counting;
    memset(&n, 0, sizeof n);
    CHECK_EQ_INT(sotto_model_device_part_bytes(m, SOTTO_PART_ENCODER), 7);
    CHECK_MSG(sotto_transcribe(m, a->samples, a->n, &o, &got, &err) == 0, "counting: %s", err.msg);
    m->be = &sotto_backend_cpu;
    char *tr = text_of(&ref), *tg = text_of(&got);
    printf("cpu:      %s\ncounting: %s\n", tr ? tr : "?", tg ? tg : "?");
    printf("calls: encode %d, decode %d (%d rows), states %d/%d, sequence gathers %d, fetches %d\n", n.encode,
           n.decode, n.decode_rows, n.state_alloc, n.state_free, n.seq_gather, n.fetch);
    CHECK_MSG(tr && tg && strlen(tr) > 20 && !strcmp(tr, tg), "the transcripts differ");
    CHECK(n.encode >= 1);
    CHECK_MSG(n.decode_rows > 20, "%d decoder rows for a 22-word clip", n.decode_rows);
    CHECK_MSG(n.decode > n.encode, "decode %d, encode %d", n.decode, n.encode);
    CHECK_MSG(n.state_alloc >= 1 && n.state_alloc == n.state_free, "states: %d allocated, %d freed",
              n.state_alloc, n.state_free);
    /* beam search reorders the beams' K/V: through the table */
    CHECK_MSG(n.seq_gather > 0, "sequence gathers %d", n.seq_gather);
    CHECK_EQ_INT(n.part_bytes, 1);
    free(tr);
    free(tg);
    sotto_transcript_free(&ref);
    sotto_transcript_free(&got);
}

static void test_failures(sotto_model *m, const sotto_audio *a) {
    sotto_err err;
    sotto_transcribe_opts o = sotto_transcribe_default_opts();
    m->be = &k_counting;

    memset(&n, 0, sizeof n);
    n.fail_state = 1;
    sotto_err_clear(&err);
    sotto_state *st = sotto_state_create(m, 2, &err);
    CHECK(st == NULL);
    CHECK_MSG(strstr(err.msg, "no room for a state") != NULL, "message: %s", err.msg);
    CHECK_MSG(n.state_free == 1, "a failed state is given back to its backend: %d", n.state_free);
    sotto_transcript t = {0};
    sotto_err_clear(&err);
    CHECK(sotto_transcribe(m, a->samples, a->n, &o, &t, &err) != 0);
    CHECK_MSG(strstr(err.msg, "no room for a state") != NULL, "transcribe: %s", err.msg);
    sotto_transcript_free(&t);

    memset(&n, 0, sizeof n);
    n.fail_encode = 1;
    sotto_err_clear(&err);
    CHECK(sotto_transcribe(m, a->samples, a->n, &o, &t, &err) != 0);
    CHECK_MSG(strstr(err.msg, "the encoder failed") != NULL, "transcribe: %s", err.msg);
    CHECK_MSG(n.state_alloc == n.state_free, "states: %d allocated, %d freed", n.state_alloc, n.state_free);
    sotto_transcript_free(&t);

    memset(&n, 0, sizeof n);
    n.fail_decode = 5; /* the prompt and a few steps go through first */
    sotto_err_clear(&err);
    CHECK(sotto_transcribe(m, a->samples, a->n, &o, &t, &err) != 0);
    CHECK_MSG(strstr(err.msg, "the decoder failed") != NULL, "transcribe: %s", err.msg);
    CHECK_MSG(n.state_alloc == n.state_free, "states: %d allocated, %d freed", n.state_alloc, n.state_free);
    sotto_transcript_free(&t);
    m->be = &sotto_backend_cpu;
}

int main(void) {
    const char *src = getenv("SOTTO_SOURCE_DIR"), *audio = getenv("SOTTO_AUDIO_DIR");
    snprintf(g_model, sizeof g_model, "%s/models/tiny.en", src ? src : ".");
    if (audio) snprintf(g_wav, sizeof g_wav, "%s/jfk.wav", audio);
    else snprintf(g_wav, sizeof g_wav, "%s/../shared/audio/jfk.wav", src ? src : ".");
    sotto_threads_set(2);
    sotto_err err;
    sotto_err_clear(&err);
    sotto_model_params p = sotto_model_default_params();
    p.device = SOTTO_DEVICE_CPU;
    sotto_model *m = sotto_model_load(g_model, &p, &err);
    CHECK_MSG(m != NULL, "%s: %s", g_model, err.msg);
    sotto_audio a = {0};
    CHECK_MSG(sotto_audio_load_16k(g_wav, &a, &err) == 0, "%s: %s", g_wav, err.msg);
    if (m && a.samples) {
        test_counting(m, &a);
        test_failures(m, &a);
    }
    sotto_audio_free(&a);
    sotto_model_free(m);
    return check_report();
}
