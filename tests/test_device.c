/* test_device.c - the engine on the GPU backend (engine/gpu_cuda.c) against
 * the engine on the CPU, on the real tiny.en model and real speech.
 *
 * What it checks depends on where it runs:
 *   - no usable GPU (a build without CUDA, or with CUDA on a machine without
 *     a driver or device, as in CI): --device cuda is refused with a clear
 *     error, auto falls back to the CPU, and the model then runs as usual;
 *   - a usable GPU: the CPU emulation build (-DSOTTO_CUDA_EMU=ON, which
 *     scripts/test.sh builds under ASan+UBSan) or a real GPU (the device
 *     check, tests/gpu/check.sh). For each weight format, CPU and GPU models
 *     are given the same work and must agree: the encoder output of a speech
 *     window, batched encodes, prompt logits, batched decoder steps across
 *     streams and beams (with K/V gathers and truncation), and the whole
 *     transcript of a clip.
 *
 * usage: test_device [--whole-clip FORMAT,...] [FORMAT ...]
 *   FORMAT: the weight formats to check (default: f32 bf16 q8 nf4 nvfp4);
 *   --whole-clip: only these formats also transcribe the whole clip (default:
 *   every format); each one named must be among FORMAT, or the test fails.
 *   The CPU emulation under ASan takes ~15 s per beam-5 clip and format, so
 *   the unit tests split the formats' whole clips across the three ctests
 *   (CMakeLists.txt); a real GPU (tests/gpu/check.sh) runs them all.
 * SOTTO_CUDA_GEMM=bf16|tf32 loosens the encoder and logit tolerances to what
 * those arithmetics give; SOTTO_CUDA_GRAPHS=0 checks the step without graphs.
 * Model: $SOTTO_SOURCE_DIR/models/tiny.en. Speech: jfk.wav from
 * $SOTTO_AUDIO_DIR, else $SOTTO_SOURCE_DIR/../shared/audio.
 */
#define _POSIX_C_SOURCE 200809L
#include "audio.h"
#include "check.h"
#include "threads.h"
#include "transcribe.h"
#include "whisper.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static char g_model[4096], g_wav[4096];
/* max relative errors allowed: fp32 GEMMs follow the CPU to rounding; with
 * SOTTO_CUDA_GEMM=bf16 the encoder's activations are rounded to bf16, so its
 * output moves more and the logits a little (transcripts must still agree) */
static double g_tol_enc = 2e-3, g_tol_logits = 2e-3;
static const char *g_whole_clip; /* comma-separated formats, NULL: all */
static int g_whole_clips_done;   /* formats whose whole clip was compared */

static int count_fields(const char *csv) {
    int n = 1;
    for (; *csv; csv++) n += *csv == ',';
    return n;
}

static int whole_clip_wanted(const char *fmt) {
    if (!g_whole_clip) return 1;
    size_t n = strlen(fmt);
    for (const char *p = g_whole_clip; *p;) {
        const char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len == n && !strncmp(p, fmt, n)) return 1;
        p += len + (e != NULL);
    }
    return 0;
}

static int argmax(const float *x, int n) {
    int b = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

/* The first 30 s window of the clip (zero-padded), [n_mels][3000]. */
static float *speech_window(const sotto_model *m, const sotto_audio *a, size_t offset) {
    const sotto_hparams *hp = sotto_model_hparams(m);
    size_t n = a->n > offset ? a->n - offset : 0;
    if (n > SOTTO_N_SAMPLES) n = SOTTO_N_SAMPLES;
    float *mel = NULL;
    size_t nf = 0;
    sotto_err err;
    float *win = calloc((size_t)hp->n_mels * SOTTO_N_FRAMES, sizeof(float));
    if (!win || sotto_mel_compute(sotto_model_mel(m), a->samples + offset, n, SOTTO_HOP, 0, &mel,
                                  &nf, &err)) {
        CHECK_MSG(0, "log-mel: %s", err.msg);
        free(win);
        return NULL;
    }
    size_t copy = nf < SOTTO_N_FRAMES ? nf : SOTTO_N_FRAMES;
    for (int c = 0; c < hp->n_mels; c++)
        memcpy(win + (size_t)c * SOTTO_N_FRAMES, mel + (size_t)c * nf, sizeof(float) * copy);
    free(mel);
    return win;
}

static void test_no_gpu(const char *why) {
    printf("no usable GPU (%s): checking the refusal and the fallback\n", why);
    CHECK(strlen(why) > 0);
    sotto_err err;
    sotto_err_clear(&err);
    sotto_model_params p = sotto_model_default_params();
    p.device = SOTTO_DEVICE_CUDA;
    sotto_model *m = sotto_model_load(g_model, &p, &err);
    CHECK(m == NULL);
    CHECK_EQ_INT(err.code, SOTTO_E_UNSUPPORTED);
    CHECK_MSG(strstr(err.msg, "no usable GPU") && strstr(err.msg, why), "message: %s", err.msg);
    sotto_model_free(m);

    p.device = SOTTO_DEVICE_AUTO;
    m = sotto_model_load(g_model, &p, &err);
    CHECK_MSG(m != NULL, "auto: %s", err.msg);
    if (!m) return;
    CHECK_EQ_INT(sotto_model_device(m), SOTTO_DEVICE_CPU);
    CHECK_STR(sotto_model_device_desc(m), "cpu");
    CHECK_EQ_INT(sotto_model_device_part_bytes(m, 0), 0);
    /* and it runs: one encode and a prompt */
    sotto_workspace *ws = sotto_workspace_create();
    sotto_state *st = sotto_state_create(m, 1, &err);
    sotto_audio a = {0};
    CHECK_MSG(sotto_audio_load_16k(g_wav, &a, &err) == 0, "%s", err.msg);
    float *win = a.samples ? speech_window(m, &a, 0) : NULL;
    if (win && st && ws) {
        CHECK(sotto_encode(m, ws, st, win, &err) == 0);
        const sotto_special_tokens *sp = sotto_model_special(m);
        int32_t toks[1] = {sp->sot};
        int want = 0;
        float *logits = malloc(sizeof(float) * (size_t)sotto_model_hparams(m)->n_vocab);
        CHECK(sotto_decode_tokens(m, ws, st, 0, toks, 1, &want, 1, logits, &err) == 0);
        CHECK(isfinite(logits[0]));
        free(logits);
    }
    free(win);
    sotto_audio_free(&a);
    sotto_state_free(st);
    sotto_workspace_free(ws);
    sotto_model_free(m);

    sotto_device d;
    CHECK(sotto_device_parse("cuda", &d) == 0 && d == SOTTO_DEVICE_CUDA);
    CHECK(sotto_device_parse("auto", &d) == 0 && d == SOTTO_DEVICE_AUTO);
    CHECK(sotto_device_parse("cpu", &d) == 0 && d == SOTTO_DEVICE_CPU);
    CHECK(sotto_device_parse("gpu", &d) != 0);
    CHECK(sotto_device_parse(NULL, &d) != 0);
}

static char *transcript_text(const sotto_transcript *t) {
    size_t n = 1;
    for (int i = 0; i < t->n_segments; i++) n += strlen(t->segments[i].text);
    char *s = calloc(n, 1);
    for (int i = 0; s && i < t->n_segments; i++) strcat(s, t->segments[i].text);
    return s;
}

/* Same work on the CPU model c and the GPU model g (same format). */
static void compare(const char *fmt, const sotto_model *c, const sotto_model *g, const sotto_audio *a) {
    const sotto_hparams *hp = sotto_model_hparams(c);
    const sotto_special_tokens *sp = sotto_model_special(c);
    const int V = hp->n_vocab;
    const size_t ne = (size_t)hp->n_audio_ctx * hp->n_audio_state;
    sotto_err err;
    sotto_err_clear(&err);
    sotto_workspace *wc = sotto_workspace_create(), *wg = sotto_workspace_create();
    sotto_state *c0 = sotto_state_create(c, 2, &err), *c1 = sotto_state_create(c, 2, &err);
    sotto_state *g0 = sotto_state_create(g, 2, &err), *g1 = sotto_state_create(g, 2, &err);
    float *w0 = speech_window(c, a, 0), *w1 = speech_window(c, a, SOTTO_SAMPLE_RATE * 4);
    float *lc = malloc(sizeof(float) * (size_t)V * 8), *lg = malloc(sizeof(float) * (size_t)V * 8);
    if (!wc || !wg || !c0 || !c1 || !g0 || !g1 || !w0 || !w1 || !lc || !lg) {
        CHECK_MSG(0, "%s: set-up failed: %s", fmt, err.msg);
        goto done;
    }

    /* encoder: one window, then a batch of two */
    CHECK(sotto_encode(c, wc, c0, w0, &err) == 0);
    CHECK(sotto_encode(c, wc, c1, w1, &err) == 0);
    CHECK_MSG(sotto_encode(g, wg, g1, w0, &err) == 0, "%s", err.msg);
    double e_one = check_rel_err_f(sotto_state_encoder_output(g1), sotto_state_encoder_output(c0), ne);
    sotto_state *gb[2] = {g0, g1};
    const float *wb[2] = {w0, w1};
    CHECK_MSG(sotto_encode_batch(g, wg, gb, wb, 2, &err) == 0, "%s", err.msg);
    double e_b0 = check_rel_err_f(sotto_state_encoder_output(g0), sotto_state_encoder_output(c0), ne);
    double e_b1 = check_rel_err_f(sotto_state_encoder_output(g1), sotto_state_encoder_output(c1), ne);
    printf("%-6s encoder max rel error: one window %.2e, batch %.2e %.2e\n", fmt, e_one, e_b0, e_b1);
    CHECK_MSG(e_one < g_tol_enc && e_b0 < g_tol_enc && e_b1 < g_tol_enc, "%s: encoder %.3g %.3g %.3g", fmt, e_one,
              e_b0, e_b1);

    /* prompt: logits of every position */
    int32_t prompt[6] = {sp->sot_prev, 1002, 257, 3290, sp->sot, sp->no_timestamps};
    int want[6] = {0, 1, 2, 3, 4, 5};
    int np = sp->no_timestamps >= 0 ? 6 : 5;
    CHECK(sotto_decode_tokens(c, wc, c0, 0, prompt, np, want, np, lc, &err) == 0);
    CHECK_MSG(sotto_decode_tokens(g, wg, g0, 0, prompt, np, want, np, lg, &err) == 0, "%s", err.msg);
    double e_prompt = check_rel_err_f(lg, lc, (size_t)np * V);
    CHECK(sotto_decode_tokens(c, wc, c1, 0, prompt, np, want + np - 1, 1, lc, &err) == 0);
    CHECK(sotto_decode_tokens(g, wg, g1, 0, prompt, np, want + np - 1, 1, lg, &err) == 0);
    e_prompt = fmax(e_prompt, check_rel_err_f(lg, lc, (size_t)V));

    /* beams: seq 1 of each state a copy of seq 0, then steps of 3 rows
     * (state 0 seqs 0 and 1, state 1 seq 0), tokens chosen on the CPU */
    int src[1] = {0}, dst[1] = {1};
    CHECK(sotto_state_seq_gather(c0, dst, src, 1) == 0);
    CHECK(sotto_state_seq_gather(g0, dst, src, 1) == 0);
    sotto_state *cs[3] = {c0, c0, c1}, *gs[3] = {g0, g0, g1};
    int seqs[3] = {0, 1, 0};
    int32_t toks[3] = {argmax(lc, V), 1002, argmax(lc, V)};
    double e_step = 0;
    int agree = 0, steps = 12;
    for (int s = 0; s < steps; s++) {
        CHECK(sotto_decode_step(c, wc, cs, seqs, toks, 3, lc, &err) == 0);
        CHECK_MSG(sotto_decode_step(g, wg, gs, seqs, toks, 3, lg, &err) == 0, "%s", err.msg);
        e_step = fmax(e_step, check_rel_err_f(lg, lc, (size_t)3 * V));
        for (int r = 0; r < 3; r++) {
            agree += argmax(lg + (size_t)r * V, V) == argmax(lc + (size_t)r * V, V);
            toks[r] = argmax(lc + (size_t)r * V, V);
        }
        if (s == 5) { /* swap the beams, then cut one back */
            int d2[2] = {0, 1}, s2[2] = {1, 0};
            CHECK(sotto_state_seq_gather(c0, d2, s2, 2) == 0);
            CHECK(sotto_state_seq_gather(g0, d2, s2, 2) == 0);
            int len = sotto_state_seq_len(c0, 1) - 3;
            CHECK(sotto_state_seq_truncate(c0, 1, len) == 0 && sotto_state_seq_truncate(g0, 1, len) == 0);
        }
    }
    CHECK_EQ_INT(sotto_state_seq_len(g0, 0), sotto_state_seq_len(c0, 0));
    printf("%-6s logits max rel error: prompt %.2e, steps %.2e; argmax agreed %d/%d\n", fmt, e_prompt, e_step,
           agree, 3 * steps);
    CHECK_MSG(e_prompt < g_tol_logits && e_step < g_tol_logits, "%s: logits %.3g %.3g", fmt, e_prompt, e_step);
    CHECK_MSG(agree >= 3 * steps - (g_tol_logits > 2e-3 ? 2 : 1), "%s: argmax agreed %d/%d", fmt, agree, 3 * steps);

    /* a step of more rows than one graph holds (32): 40 beams of one stream */
    {
        enum { NB = 40 };
        sotto_state *cb = sotto_state_create(c, NB, &err), *gb40 = sotto_state_create(g, NB, &err);
        float *lc40 = malloc(sizeof(float) * (size_t)V * NB), *lg40 = malloc(sizeof(float) * (size_t)V * NB);
        if (cb && gb40 && lc40 && lg40 && sotto_encode(c, wc, cb, w0, &err) == 0 &&
            sotto_encode(g, wg, gb40, w0, &err) == 0) {
            int last = np - 1;
            CHECK(sotto_decode_tokens(c, wc, cb, 0, prompt, np, &last, 1, lc40, &err) == 0);
            CHECK(sotto_decode_tokens(g, wg, gb40, 0, prompt, np, &last, 1, lg40, &err) == 0);
            int dsts[NB], srcs[NB], sq[NB];
            int32_t tk[NB];
            sotto_state *cs40[NB], *gs40[NB];
            for (int b = 0; b < NB; b++)
                dsts[b] = b, srcs[b] = 0, sq[b] = b, tk[b] = 400 + 13 * b, cs40[b] = cb, gs40[b] = gb40;
            CHECK(sotto_state_seq_gather(cb, dsts, srcs, NB) == 0 && sotto_state_seq_gather(gb40, dsts, srcs, NB) == 0);
            CHECK(sotto_decode_step(c, wc, cs40, sq, tk, NB, lc40, &err) == 0);
            CHECK_MSG(sotto_decode_step(g, wg, gs40, sq, tk, NB, lg40, &err) == 0, "%s", err.msg);
            double e40 = check_rel_err_f(lg40, lc40, (size_t)NB * V);
            printf("%-6s logits max rel error, one step of %d rows: %.2e\n", fmt, NB, e40);
            CHECK_MSG(e40 < g_tol_logits, "%s: %d-row step %.3g", fmt, NB, e40);
        } else {
            CHECK_MSG(0, "%s: 40-beam set-up: %s", fmt, err.msg);
        }
        sotto_state_free(cb);
        sotto_state_free(gb40);
        free(lc40);
        free(lg40);
    }

    /* the whole clip, default options (beam 5, temperature fallback) */
    if (whole_clip_wanted(fmt)) {
        g_whole_clips_done++;
        sotto_transcribe_opts o = sotto_transcribe_default_opts();
        sotto_transcript tc = {0}, tg = {0};
        CHECK(sotto_transcribe(c, a->samples, a->n, &o, &tc, &err) == 0);
        CHECK_MSG(sotto_transcribe(g, a->samples, a->n, &o, &tg, &err) == 0, "%s", err.msg);
        char *xc = transcript_text(&tc), *xg = transcript_text(&tg);
        printf("%-6s cpu: %s\n%-6s gpu: %s\n", fmt, xc ? xc : "?", fmt, xg ? xg : "?");
        CHECK_MSG(xc && xg && strlen(xc) > 20 && !strcmp(xc, xg), "%s: transcripts differ", fmt);
        free(xc);
        free(xg);
        sotto_transcript_free(&tc);
        sotto_transcript_free(&tg);
    } else {
        printf("%-6s whole clip: not asked for (--whole-clip %s)\n", fmt, g_whole_clip);
    }
done:
    free(w0);
    free(w1);
    free(lc);
    free(lg);
    sotto_state_free(c0);
    sotto_state_free(c1);
    sotto_state_free(g0);
    sotto_state_free(g1);
    sotto_workspace_free(wc);
    sotto_workspace_free(wg);
}

static void test_gpu(const char *desc, int argc, char **argv) {
    /* argv: the formats (after the options) */
    printf("GPU: %s\n", desc);
    sotto_err err;
    sotto_err_clear(&err);
    sotto_audio a = {0};
    CHECK_MSG(sotto_audio_load_16k(g_wav, &a, &err) == 0, "%s: %s", g_wav, err.msg);
    if (!a.samples) return;
    const char *all[] = {"f32", "bf16", "q8", "nf4", "nvfp4"};
    int n = argc > 1 ? argc - 1 : 5;
    for (int i = 0; i < n; i++) {
        const char *fmt = argc > 1 ? argv[i + 1] : all[i];
        sotto_model_params p = sotto_model_default_params();
        if (sotto_wfmt_parse(fmt, &p.weights)) {
            CHECK_MSG(0, "unknown format %s", fmt);
            continue;
        }
        sotto_model *c = sotto_model_load(g_model, &p, &err);
        CHECK_MSG(c != NULL, "%s", err.msg);
        p.device = SOTTO_DEVICE_CUDA;
        sotto_model *g = c ? sotto_model_load(g_model, &p, &err) : NULL;
        CHECK_MSG(!c || g != NULL, "%s on the GPU: %s", fmt, err.msg);
        if (c && g) {
            CHECK_EQ_INT(sotto_model_device(g), SOTTO_DEVICE_CUDA);
            CHECK_EQ_INT(sotto_model_device(c), SOTTO_DEVICE_CPU);
            /* weights upload packed: device bytes per part within 5% of the host's */
            for (int part = 0; part < 3; part++) {
                double hb = (double)sotto_model_part_bytes(c, part), db = (double)sotto_model_device_part_bytes(g, part);
                CHECK_MSG(db > 0.5 * hb && db < 1.05 * hb + 65536, "%s part %d: %.0f device vs %.0f host bytes", fmt,
                          part, db, hb);
            }
            compare(fmt, c, g, &a);
        }
        sotto_model_free(g);
        sotto_model_free(c);
    }
    sotto_audio_free(&a);
    /* a misspelt or unchecked --whole-clip format must not skip every clip */
    if (g_whole_clip)
        CHECK_MSG(g_whole_clips_done == count_fields(g_whole_clip), "--whole-clip %s: %d of its formats checked",
                  g_whole_clip, g_whole_clips_done);
}

int main(int argc, char **argv) {
    if (argc > 2 && !strcmp(argv[1], "--whole-clip")) {
        g_whole_clip = argv[2];
        argv[2] = argv[0];
        argv += 2;
        argc -= 2;
    }
    const char *src = getenv("SOTTO_SOURCE_DIR"), *audio = getenv("SOTTO_AUDIO_DIR");
    snprintf(g_model, sizeof g_model, "%s/models/tiny.en", src ? src : ".");
    if (audio) snprintf(g_wav, sizeof g_wav, "%s/jfk.wav", audio);
    else snprintf(g_wav, sizeof g_wav, "%s/../shared/audio/jfk.wav", src ? src : ".");
    sotto_threads_set(2);
    /* the CPU side in fp32 throughout: the GPU's orchestration is held to the CPU
       engine's numbers, not to the CPU's bf16 and int8 GEMMs (test_gemm_bf16 and
       test_gemm_q8 check those) */
    setenv("SOTTO_BF16_GEMM", "0", 0);
    setenv("SOTTO_Q8_GEMM", "0", 0);
    const char *gemm = getenv("SOTTO_CUDA_GEMM");
    if (gemm && !strcmp(gemm, "bf16")) g_tol_enc = 0.25, g_tol_logits = 2e-2;
    else if (gemm && !strcmp(gemm, "tf32")) g_tol_enc = 2e-2, g_tol_logits = 1e-2;
    char desc[256], why[256];
    if (sotto_device_cuda_usable(desc, sizeof desc, why, sizeof why)) test_gpu(desc, argc, argv);
    else test_no_gpu(why);
    return check_report();
}
