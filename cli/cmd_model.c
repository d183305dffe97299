/* cmd_model.c - `sotto info` (model description as JSON) and `sotto encode`
 * (encoder output of a file's first window, for comparisons with other
 * implementations). */
#include "audio.h"
#include "commands.h"
#include "model_opts.h"
#include "threads.h"
#include "whisper.h"

#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The shared model options (model_opts.h) with getopt_long, anywhere on
 * the line; positional arguments are collected into pos[]. Returns the
 * count of positionals, -1 (usage error, message on stderr) or -2 (--help). */
#define OPT_AUDIO_CTX 0x300

/* audio_ctx: where `sotto encode --audio-ctx N` goes (NULL: not an option here). */
static int common_args(int argc, char **argv, const char **model, sotto_model_params *mp,
                       const char **pos, int max_pos, int *audio_ctx) {
    static const struct option longopts[] = {CLI_MODEL_LONGOPTS,
                                             {"help", no_argument, NULL, 'h'},
                                             {"audio-ctx", required_argument, NULL, OPT_AUDIO_CTX},
                                             {NULL, 0, NULL, 0}};
    cli_model_opts o;
    cli_model_opts_init(&o);
    o.mp = *mp;
    optind = 1;
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
        if (c == OPT_AUDIO_CTX && audio_ctx) {
            char *end;
            long v = strtol(optarg, &end, 10);
            if (*end || v < 1 || v > 100000) {
                fprintf(stderr, "sotto encode: --audio-ctx needs a number of encoder positions\n");
                return -1;
            }
            *audio_ctx = (int)v;
            continue;
        }
        int r = cli_model_opt(c, optarg, &o, argv[0]);
        if (r < 0) return -1;
        if (r > 0) continue;
        if (c == 'h') return -2;
        return cli_opt_error(c, argc, argv, argv[0]);
    }
    int n = argc - optind;
    if (n > max_pos) {
        fprintf(stderr, "sotto %s: too many arguments ('%s')\n", argv[0], argv[optind + max_pos]);
        return -1;
    }
    for (int i = 0; i < n; i++) pos[i] = argv[optind + i];
    *model = o.model;
    *mp = o.mp;
    if (o.threads) sotto_threads_set(o.threads);
    return n;
}

/* VmRSS of this process in bytes. */
static size_t current_rss(void) {
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return 0;
    char line[256];
    size_t kb = 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "VmRSS: %zu kB", &kb) == 1) break;
    fclose(f);
    return kb * 1024;
}

int sotto_cmd_info(int argc, char **argv) {
    const char *model_dir, *pos[1];
    sotto_model_params mp = sotto_model_default_params();
    int n = common_args(argc, argv, &model_dir, &mp, pos, 0, NULL);
    if (n != 0) {
        FILE *f = n == -2 ? stdout : stderr;
        fprintf(f, "usage: sotto info [options]\nPrints the model's dimensions, special tokens and "
                   "weight formats as JSON.\n\n");
        cli_model_opts_usage(f);
        return n == -2 ? 0 : 2;
    }
    sotto_err err;
    sotto_err_clear(&err);
    size_t rss_before = current_rss();
    sotto_model *m = sotto_model_load(model_dir, &mp, &err);
    if (!m) {
        fprintf(stderr, "sotto info: %s\n", err.msg);
        return 1;
    }
    const sotto_hparams *hp = sotto_model_hparams(m);
    const sotto_special_tokens *sp = sotto_model_special(m);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "dir", sotto_model_dir(m));
    cJSON_AddStringToObject(o, "format", sotto_model_format_name(m));
    cJSON_AddBoolToObject(o, "multilingual", sotto_model_is_multilingual(m));
    cJSON_AddNumberToObject(o, "weight_bytes", (double)sotto_model_weight_bytes(m));
    cJSON *pb = cJSON_AddObjectToObject(o, "part_bytes");
    cJSON_AddNumberToObject(pb, "encoder", (double)sotto_model_part_bytes(m, 0));
    cJSON_AddNumberToObject(pb, "decoder", (double)sotto_model_part_bytes(m, 1));
    cJSON_AddNumberToObject(pb, "embed", (double)sotto_model_part_bytes(m, 2));
    char policy[512];
    sotto_model_policy_string(m, policy, sizeof policy);
    cJSON_AddStringToObject(o, "policy", policy);
    cJSON_AddBoolToObject(o, "snapshot", sotto_model_is_snapshot(m));
    cJSON_AddNumberToObject(o, "rss_before_load", (double)rss_before);
    cJSON_AddNumberToObject(o, "peak_rss_after_load", (double)sotto_model_load_peak_rss(m));
    cJSON_AddNumberToObject(o, "largest_tensor_bytes", (double)sotto_model_largest_tensor(m));
    cJSON *h = cJSON_AddObjectToObject(o, "hparams");
    const struct {
        const char *k;
        int32_t v;
    } hv[] = {{"n_mels", hp->n_mels},           {"n_audio_ctx", hp->n_audio_ctx},
              {"n_audio_state", hp->n_audio_state}, {"n_audio_head", hp->n_audio_head},
              {"n_audio_layer", hp->n_audio_layer}, {"n_audio_ff", hp->n_audio_ff},
              {"n_text_ctx", hp->n_text_ctx},       {"n_text_state", hp->n_text_state},
              {"n_text_head", hp->n_text_head},     {"n_text_layer", hp->n_text_layer},
              {"n_text_ff", hp->n_text_ff},         {"n_vocab", hp->n_vocab}};
    for (size_t i = 0; i < sizeof hv / sizeof hv[0]; i++) cJSON_AddNumberToObject(h, hv[i].k, hv[i].v);
    cJSON *s = cJSON_AddObjectToObject(o, "special");
    const struct {
        const char *k;
        int32_t v;
    } sv[] = {{"eot", sp->eot},
              {"sot", sp->sot},
              {"sot_prev", sp->sot_prev},
              {"sot_lm", sp->sot_lm},
              {"no_speech", sp->no_speech},
              {"no_timestamps", sp->no_timestamps},
              {"transcribe", sp->transcribe},
              {"translate", sp->translate},
              {"timestamp_begin", sp->timestamp_begin},
              {"timestamp_end", sp->timestamp_end},
              {"lang_begin", sp->lang_begin},
              {"n_langs", sp->n_langs}};
    for (size_t i = 0; i < sizeof sv / sizeof sv[0]; i++) cJSON_AddNumberToObject(s, sv[i].k, sv[i].v);
    char *str = cJSON_Print(o);
    if (str) printf("%s\n", str);
    free(str);
    cJSON_Delete(o);
    sotto_model_free(m);
    return 0;
}

int sotto_cmd_encode(int argc, char **argv) {
    const char *model_dir, *pos[2];
    sotto_model_params mp = sotto_model_default_params();
    int audio_ctx = 0; /* 0: the whole window */
    int na = common_args(argc, argv, &model_dir, &mp, pos, 2, &audio_ctx);
    if (na != 2) {
        FILE *f = na == -2 ? stdout : stderr;
        fprintf(f, "usage: sotto encode [options] FILE.wav OUT.f32\n"
                   "Writes int32 n_ctx, int32 width, then float32 [n_ctx][width]: the encoder\n"
                   "output of the first 30 s window (features as faster-whisper computes them).\n"
                   "  --audio-ctx N   encode only the window's first N positions (2N frames), as\n"
                   "                  the server's --audio-ctx does\n\n");
        cli_model_opts_usage(f);
        return na == -2 ? 0 : 2;
    }
    sotto_err err;
    sotto_err_clear(&err);
    sotto_model *m = sotto_model_load(model_dir, &mp, &err);
    if (!m) {
        fprintf(stderr, "sotto encode: %s\n", err.msg);
        return 1;
    }
    int status = 1;
    sotto_audio audio = {0};
    float *mel = NULL, *win = NULL;
    sotto_workspace *ws = NULL;
    sotto_state *st = NULL;
    FILE *f = NULL;
    const sotto_hparams *hp = sotto_model_hparams(m);
    size_t n_frames;
    if (sotto_audio_load_16k(pos[0], &audio, &err) ||
        sotto_mel_compute(sotto_model_mel(m), audio.samples, audio.n, SOTTO_HOP, 0, &mel,
                          &n_frames, &err)) {
        fprintf(stderr, "sotto encode: %s\n", err.msg);
        goto done;
    }
    win = calloc((size_t)hp->n_mels * SOTTO_N_FRAMES, sizeof(float));
    ws = sotto_workspace_create();
    st = sotto_state_create(m, 1, &err);
    if (!win || !ws || !st) {
        fprintf(stderr, "sotto encode: out of memory\n");
        goto done;
    }
    /* faster-whisper: features[:, :content_frames] padded with zeros */
    size_t take = n_frames - 1 < SOTTO_N_FRAMES ? n_frames - 1 : SOTTO_N_FRAMES;
    for (int c = 0; c < hp->n_mels; c++)
        memcpy(win + (size_t)c * SOTTO_N_FRAMES, mel + (size_t)c * n_frames, sizeof(float) * take);
    const int n_ctx = audio_ctx ? audio_ctx : hp->n_audio_ctx;
    const float *wins[1] = {win};
    if (sotto_encode_batch_ctx(m, ws, &st, wins, &n_ctx, 1, &err)) {
        fprintf(stderr, "sotto encode: %s\n", err.msg);
        goto done;
    }
    f = fopen(pos[1], "wb");
    int32_t dims[2] = {sotto_state_encoded_positions(st), hp->n_audio_state};
    size_t n = (size_t)dims[0] * dims[1];
    if (!f || fwrite(dims, sizeof dims, 1, f) != 1 ||
        fwrite(sotto_state_encoder_output(st), sizeof(float), n, f) != n) {
        fprintf(stderr, "sotto encode: cannot write %s\n", pos[1]);
        goto done;
    }
    status = 0;
done:
    if (f && fclose(f) != 0) status = 1;
    sotto_audio_free(&audio);
    free(mel);
    free(win);
    sotto_state_free(st);
    sotto_workspace_free(ws);
    sotto_model_free(m);
    return status;
}
