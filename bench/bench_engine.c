/* bench_engine.c - times the engine's stages on one model: log-mel of 30 s,
 * encoder per 30 s window, B windows in one batch and one at a time, decoder prompt, decoder step per token at 1 and
 * N streams (batched rows from N states), and prints one table.
 *
 * usage: bench_engine [--model DIR] [--threads N] [--reps N] [--streams N]
 *                     [--steps N]
 * Input is synthetic (a chirp + noise); speed does not depend on it.
 */
#define _POSIX_C_SOURCE 200809L
#include "blas_env.h"
#include "threads.h"
#include "whisper.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

int main(int argc, char **argv) {
    sotto_blas_check_coretype(argv);
    const char *model_dir = "models/tiny.en";
    int threads = 0, reps = 3, streams = 8, steps = 32, synthetic = 0;
    sotto_model_params mp = sotto_model_default_params();
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--model") && i + 1 < argc) model_dir = argv[++i];
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--streams") && i + 1 < argc) streams = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--steps") && i + 1 < argc) steps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--weights") && i + 1 < argc) {
            if (sotto_wfmt_parse(argv[++i], &mp.weights)) {
                fprintf(stderr, "bench_engine: unknown weight format %s\n", argv[i]);
                return 2;
            }
        } else if (!strcmp(argv[i], "--policy") && i + 1 < argc) mp.policy = argv[++i];
        else if (!strcmp(argv[i], "--device") && i + 1 < argc) {
            if (sotto_device_parse(argv[++i], &mp.device)) {
                fprintf(stderr, "bench_engine: unknown device %s\n", argv[i]);
                return 2;
            }
        } else if (!strcmp(argv[i], "--synthetic")) synthetic = 1;
        else {
            fprintf(stderr, "usage: bench_engine [--model DIR] [--weights F] [--policy P] [--device D] "
                            "[--threads N] [--reps N] [--streams N] [--steps N] [--synthetic]\n");
            return 2;
        }
    }
    if (reps < 1 || streams < 1 || streams > 64 || steps < 1 || steps > 200) {
        fprintf(stderr, "bench_engine: bad --reps/--streams/--steps\n");
        return 2;
    }
    threads = sotto_threads_set(threads);
    sotto_err err;
    sotto_err_clear(&err);
    size_t vram0 = 0, vram1 = 0, vram2 = 0, vram_total = 0;
    int gpu = mp.device != SOTTO_DEVICE_CPU && !sotto_device_memory(&vram0, &vram_total, NULL);
    double t0 = now_ms();
    sotto_model *m = sotto_model_load(model_dir, &mp, &err);
    if (!m) {
        fprintf(stderr, "bench_engine: %s\n", err.msg);
        return 1;
    }
    double t_load = now_ms() - t0;
    gpu = gpu && sotto_model_device(m) == SOTTO_DEVICE_CUDA;
    if (gpu) sotto_device_memory(&vram1, &vram_total, NULL);
    const sotto_hparams *hp = sotto_model_hparams(m);
    const sotto_special_tokens *sp = sotto_model_special(m);

    /* 30 s of synthetic audio */
    size_t n = SOTTO_N_SAMPLES;
    float *audio = malloc(sizeof(float) * n);
    unsigned seed = 1;
    for (size_t i = 0; i < n; i++) {
        double t = (double)i / SOTTO_SAMPLE_RATE;
        seed = seed * 1103515245u + 12345u;
        audio[i] = (float)(0.3 * sin(6.283185307179586 * (200 + 50 * t) * t) +
                           0.01 * ((seed >> 16) / 32768.0 - 1.0));
    }
    double *v = malloc(sizeof(double) * (size_t)(reps > steps ? reps : steps));
    float *mel = NULL, *win = calloc((size_t)hp->n_mels * SOTTO_N_FRAMES, sizeof(float));
    size_t nf = 0;
    for (int r = 0; r < reps; r++) {
        free(mel);
        mel = NULL;
        double a = now_ms();
        if (sotto_mel_compute(sotto_model_mel(m), audio, n, SOTTO_HOP, 0, &mel, &nf, &err)) {
            fprintf(stderr, "bench_engine: %s\n", err.msg);
            return 1;
        }
        v[r] = now_ms() - a;
    }
    double t_mel = median(v, reps);
    for (int c = 0; c < hp->n_mels; c++)
        memcpy(win + (size_t)c * SOTTO_N_FRAMES, mel + (size_t)c * nf, sizeof(float) * SOTTO_N_FRAMES);

    sotto_workspace *ws = sotto_workspace_create();
    sotto_state **st = calloc((size_t)streams, sizeof *st);
    for (int s = 0; s < streams; s++) {
        st[s] = sotto_state_create(m, 1, &err);
        if (!st[s]) {
            fprintf(stderr, "bench_engine: %s\n", err.msg);
            return 1;
        }
    }
    for (int r = 0; r < reps + 1; r++) { /* first run warms the workspace */
        double a = now_ms();
        if (sotto_encode(m, ws, st[0], win, &err)) {
            fprintf(stderr, "bench_engine: %s\n", err.msg);
            return 1;
        }
        if (r) v[r - 1] = now_ms() - a;
    }
    double t_enc = median(v, reps);
    /* a batch of windows against the same windows one call each (server/worker.c
       encodes a partial batch window by window): B cut windows of 10, 12, ... s
       (with the server's 1 s padding), and B whole ones */
    const int B = streams < 6 ? streams : 6;
    const float **wins = malloc(sizeof *wins * (size_t)B);
    int *cut = malloc(sizeof(int) * (size_t)B), *whole = malloc(sizeof(int) * (size_t)B);
    for (int b = 0; b < B; b++) {
        wins[b] = win;
        cut[b] = sotto_encoder_positions(m, (size_t)(10 + 2 * b) * SOTTO_SAMPLE_RATE, SOTTO_SAMPLE_RATE);
        whole[b] = hp->n_audio_ctx;
    }
    double t_batch[2][2]; /* [cut, whole][one batch, one by one] */
    for (int kind = 0; kind < 2; kind++) {
        const int *ctx = kind ? whole : cut;
        for (int way = 0; way < 2; way++) {
            for (int r = 0; r < reps; r++) {
                double a = now_ms();
                int rc = 0;
                if (way == 0) rc = sotto_encode_batch_ctx(m, ws, st, wins, ctx, B, &err);
                for (int b = 0; way == 1 && b < B && !rc; b++)
                    rc = sotto_encode_batch_ctx(m, ws, st + b, wins + b, ctx + b, 1, &err);
                if (rc) {
                    fprintf(stderr, "bench_engine: %s\n", err.msg);
                    return 1;
                }
                v[r] = now_ms() - a;
            }
            t_batch[kind][way] = median(v, reps);
        }
    }
    free(wins);
    free(cut);
    free(whole);
    for (int s = 0; s < streams; s++) sotto_encode(m, ws, st[s], win, &err);

    /* prompt of 1 + 3 task tokens + 64 previous-text tokens */
    int32_t prompt[72];
    int np = 0;
    prompt[np++] = sp->sot_prev;
    for (int i = 0; i < 64; i++) prompt[np++] = 400 + i * 7;
    prompt[np++] = sp->sot;
    int want = np - 1;
    float *logits = malloc(sizeof(float) * (size_t)hp->n_vocab * streams);
    double t_prompt = 0;
    for (int s = 0; s < streams; s++) {
        sotto_state_seq_truncate(st[s], 0, 0);
        double a = now_ms();
        if (sotto_decode_tokens(m, ws, st[s], 0, prompt, np, &want, 1, logits, &err)) {
            fprintf(stderr, "bench_engine: %s\n", err.msg);
            return 1;
        }
        if (s == 0) t_prompt = now_ms() - a;
    }
    int seqs[64] = {0};
    int32_t toks[64];
    double t_step[2];
    int ns[2] = {1, streams};
    for (int k = 0; k < 2; k++) {
        for (int s = 0; s < streams; s++) sotto_state_seq_truncate(st[s], 0, np);
        for (int i = 0; i < steps; i++) {
            for (int s = 0; s < ns[k]; s++) toks[s] = 262 + (i * 13 + s) % 5000;
            double a = now_ms();
            if (sotto_decode_step(m, ws, st, seqs, toks, ns[k], logits, &err)) {
                fprintf(stderr, "bench_engine: %s\n", err.msg);
                return 1;
            }
            v[i] = now_ms() - a;
        }
        t_step[k] = median(v, steps);
    }
    if (gpu) sotto_device_memory(&vram2, &vram_total, NULL);
    char policy[512];
    sotto_model_policy_string(m, policy, sizeof policy);
    printf("model %s%s: %d mels, width %d, %d+%d layers, vocab %d, weights %.1f MB (%s)\n",
           model_dir, synthetic ? " (synthetic: random weights, shapes only)" : "", hp->n_mels,
           hp->n_audio_state, hp->n_audio_layer, hp->n_text_layer, hp->n_vocab,
           sotto_model_weight_bytes(m) / 1e6, policy);
    printf("device %s, threads %d, BLAS core %s, medians of %d reps / %d steps\n",
           sotto_model_device_desc(m), threads, sotto_blas_corename(), reps, steps);
    if (gpu) {
        const char *gm = getenv("SOTTO_CUDA_GEMM"), *gr = getenv("SOTTO_CUDA_GRAPHS");
        printf("encoder GEMMs %s, decoder step %s\n", gm && *gm ? gm : "f32",
               gr && !strcmp(gr, "0") ? "kernel by kernel (no CUDA graph)" : "in a CUDA graph");
    }
    printf("| stage | ms |\n|---|---|\n");
    printf("| load model | %.1f |\n", t_load);
    printf("| log-mel, 30 s | %.2f |\n", t_mel);
    printf("| encoder, one 30 s window | %.1f |\n", t_enc);
    printf("| encoder, %d cut windows (10-%d s + 1 s): one batch / one at a time | %.1f / %.1f |\n", B,
           10 + 2 * (B - 1), t_batch[0][0], t_batch[0][1]);
    printf("| encoder, %d whole windows: one batch / one at a time | %.1f / %.1f |\n", B, t_batch[1][0],
           t_batch[1][1]);
    printf("| decoder prompt, %d tokens | %.2f |\n", np, t_prompt);
    printf("| decoder step, 1 stream | %.2f |\n", t_step[0]);
    printf("| decoder step, %d streams (per step) | %.2f |\n", streams, t_step[1]);
    printf("| decoder step, %d streams (per token) | %.2f |\n", streams, t_step[1] / streams);
    if (gpu) {
        printf("| VRAM: weights, MiB (encoder / decoder / embedding) | %.1f (%.1f / %.1f / %.1f) |\n",
               (sotto_model_device_part_bytes(m, 0) + sotto_model_device_part_bytes(m, 1) +
                sotto_model_device_part_bytes(m, 2)) / 1048576.0,
               sotto_model_device_part_bytes(m, 0) / 1048576.0, sotto_model_device_part_bytes(m, 1) / 1048576.0,
               sotto_model_device_part_bytes(m, 2) / 1048576.0);
        printf("| VRAM: in use after loading, MiB (device-wide, less before) | %.1f |\n",
               ((double)vram1 - (double)vram0) / 1048576.0);
        printf("| VRAM: in use after the run (+%d states, scratch), MiB | %.1f |\n", streams,
               ((double)vram2 - (double)vram0) / 1048576.0);
    }
    for (int s = 0; s < streams; s++) sotto_state_free(st[s]);
    free(st);
    sotto_workspace_free(ws);
    free(logits);
    free(audio);
    free(mel);
    free(win);
    free(v);
    sotto_model_free(m);
    return 0;
}
