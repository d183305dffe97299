/* cmd_quantize.c - `sotto quantize`: writes a pre-quantized snapshot of a
 * model and optionally verifies that it reloads to the same model. */
#include "audio.h"
#include "commands.h"
#include "model_opts.h"
#include "snapshot.h"
#include "threads.h"
#include "transcribe.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *f) {
    fprintf(f,
            "usage: sotto quantize --weights F [--policy P] [--nf4-double-quant] [--scale-search]\n"
            "                      [--calib FILE] [--device D] [--threads N]\n"
            "                      [--verify]\n"
            "                      IN_DIR OUT_DIR [CLIP.wav ...]\n"
            "(options may come after the directories; -- ends them)\n"
            "\n"
            "Loads IN_DIR (CTranslate2 or Hugging Face), quantizes it while loading\n"
            "(F: f32 | f16 | bf16 | q8 | nf4 | nvfp4; P: per-part overrides such as\n"
            "encoder=nvfp4,decoder=q8) and writes a snapshot to OUT_DIR (safetensors +\n"
            "sotto_quant.json) that loads without the original.\n"
            "--verify reloads OUT_DIR, requires every tensor to equal the in-memory one,\n"
            "and requires identical transcripts (greedy) of the CLIPs from both models.\n");
}

/* Transcribes with greedy, temperature 0, no fallback: deterministic. */
static int transcribe_clip(const sotto_model *m, const sotto_audio *a, sotto_transcript *t,
                           sotto_err *err) {
    sotto_transcribe_opts o = sotto_transcribe_default_opts();
    o.beam_size = 1;
    o.n_temperatures = 1;
    o.temperatures[0] = 0.0f;
    return sotto_transcribe(m, a->samples, a->n, &o, t, err);
}

static int same_transcript(const sotto_transcript *a, const sotto_transcript *b) {
    if (a->n_segments != b->n_segments) return 0;
    for (int i = 0; i < a->n_segments; i++) {
        const sotto_segment *x = &a->segments[i], *y = &b->segments[i];
        if (strcmp(x->text, y->text) != 0 || x->n_tokens != y->n_tokens ||
            memcmp(x->tokens, y->tokens, sizeof(int32_t) * (size_t)x->n_tokens) != 0 ||
            x->start != y->start || x->end != y->end)
            return 0;
    }
    return 1;
}

int sotto_cmd_quantize(int argc, char **argv) {
    enum { OPT_VERIFY = 1 };
    static const struct option longopts[] = {CLI_MODEL_LONGOPTS,
                                             {"verify", no_argument, NULL, OPT_VERIFY},
                                             {"help", no_argument, NULL, 'h'},
                                             {NULL, 0, NULL, 0}};
    cli_model_opts o;
    cli_model_opts_init(&o);
    int verify = 0, weights_given = 0;
    optind = 1;
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
        if (c == CLI_OPT_MODEL) {
            fprintf(stderr, "sotto quantize: the model to quantize is IN_DIR, not --model\n");
            return 2;
        }
        int r = cli_model_opt(c, optarg, &o, "quantize");
        if (r < 0) return 2;
        if (r > 0) {
            weights_given |= c == CLI_OPT_WEIGHTS;
            continue;
        }
        if (c == 'h') {
            usage(stdout);
            return 0;
        }
        if (c == OPT_VERIFY) {
            verify = 1;
            continue;
        }
        cli_opt_error(c, argc, argv, "quantize");
        return 2;
    }
    sotto_model_params mp = o.mp;
    if (o.threads) sotto_threads_set(o.threads);
    const char *const *pos = (const char *const *)argv + optind;
    const int np = argc - optind;
    if (np < 2 || (!weights_given && !mp.policy)) {
        usage(stderr);
        return 2;
    }
    sotto_err err;
    sotto_err_clear(&err);
    sotto_model *m = sotto_model_load(pos[0], &mp, &err);
    if (!m) {
        fprintf(stderr, "sotto quantize: %s\n", err.msg);
        return 1;
    }
    int status = 0;
    char policy[512];
    sotto_model_policy_string(m, policy, sizeof policy);
    if (sotto_snapshot_save(m, pos[1], &err)) {
        fprintf(stderr, "sotto quantize: %s\n", err.msg);
        sotto_model_free(m);
        return 1;
    }
    printf("wrote %s: %s\n", pos[1], policy);
    printf("weights: %.2f MB (encoder %.2f, decoder %.2f, embedding %.2f); peak RSS while "
           "loading %.1f MB\n",
           sotto_model_weight_bytes(m) / 1e6, sotto_model_part_bytes(m, 0) / 1e6,
           sotto_model_part_bytes(m, 1) / 1e6, sotto_model_part_bytes(m, 2) / 1e6,
           sotto_model_load_peak_rss(m) / 1e6);
    if (verify) {
        sotto_model_params rp = sotto_model_default_params();
        sotto_model *r = sotto_model_load(pos[1], &rp, &err);
        if (!r) {
            fprintf(stderr, "sotto quantize: verify: the snapshot does not load: %s\n", err.msg);
            sotto_model_free(m);
            return 1;
        }
        if (sotto_snapshot_compare(m, r, &err)) {
            fprintf(stderr, "sotto quantize: verify: %s\n", err.msg);
            status = 1;
        } else {
            printf("verify: every tensor of the snapshot equals the in-memory model\n");
        }
        int same = 0, total = 0;
        for (int i = 2; i < np; i++) {
            sotto_audio a;
            sotto_transcript t1, t2;
            if (sotto_audio_load_16k(pos[i], &a, &err)) {
                fprintf(stderr, "sotto quantize: %s\n", err.msg);
                status = 1;
                continue;
            }
            total++;
            if (transcribe_clip(m, &a, &t1, &err) || transcribe_clip(r, &a, &t2, &err)) {
                fprintf(stderr, "sotto quantize: %s: %s\n", pos[i], err.msg);
                status = 1;
            } else if (same_transcript(&t1, &t2)) {
                same++;
            } else {
                fprintf(stderr, "sotto quantize: verify: %s transcribes differently\n", pos[i]);
                status = 1;
            }
            sotto_transcript_free(&t1);
            sotto_transcript_free(&t2);
            sotto_audio_free(&a);
        }
        if (total) printf("verify: %d/%d clips transcribe identically\n", same, total);
        sotto_model_free(r);
    }
    sotto_model_free(m);
    return status;
}
