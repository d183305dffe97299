/* cmd_transcribe.c - `sotto transcribe`: files to text with timestamps. */
#define _POSIX_C_SOURCE 200809L
#include "audio.h"
#include "commands.h"
#include "log.h"
#include "model_opts.h"
#include "silero.h"
#include "threads.h"
#include "transcribe.h"
#include "vad_model.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef enum out_fmt { FMT_TEXT, FMT_TXT, FMT_JSON, FMT_SRT, FMT_VTT } out_fmt;

typedef struct cli_opts {
    cli_model_opts m; /* --model, --weights, --policy, --device, --threads, 4-bit options */
    out_fmt fmt;
    const char *output;
    int progress; /* -1 auto (when stderr is a terminal) */
    const char *vad_model; /* explicit --vad-model, or NULL: the default file if present */
    int no_vad;
    sotto_transcribe_opts t;
} cli_opts;

static void usage(FILE *f) {
    fprintf(f,
            "usage: sotto transcribe [options] FILE.wav [FILE.wav ...]\n"
            "(options may come after the files; -- ends them)\n"
            "\n");
    cli_model_opts_usage(f);
    fprintf(f,
            "  --language L           language code or name, or auto (multilingual models)\n"
            "  --task T               transcribe | translate (multilingual models)\n"
            "  --beam N               beam size; 1 = greedy (default 5)\n"
            "  --best-of N            samples per fallback temperature (default 5)\n"
            "  --temperature T[,T..]  temperatures tried in order (default 0,0.2,...,1.0)\n"
            "  --patience P           beam search patience (default 1)\n"
            "  --length-penalty L     (default 1)\n"
            "  --no-speech-threshold X, --log-prob-threshold X, --compression-ratio-threshold X\n"
            "                         fallback / silence thresholds (0.6, -1, 2.4; 'none' disables)\n"
            "  --no-condition         do not give the previous window's text as prompt\n"
            "  --initial-prompt TEXT  text to condition the first window on\n"
            "  --prefix TEXT          text forced at the start of the first window\n"
            "  --no-timestamps        decode without timestamp tokens\n"
            "  --max-new-tokens N     per window\n"
            "  --vad-model FILE       Silero VAD weights (default %s, when present):\n"
            "                         30 s windows in which it finds no speech are not decoded\n"
            "  --no-vad               decode every window\n"
            "  --no-guardrails        only Whisper's own fallback tests (no repetition detector,\n"
            "                         no bound on words per second)\n"
            "  --format F             text (timestamped lines, default) | txt | json | srt | vtt\n"
            "  --output PATH          write there instead of standard output\n"
            "  --progress / --no-progress   progress on stderr (default: when a terminal)\n"
            "  --log-level L          debug | info | warn | error\n"
            "  -h, --help             this text\n",
            SOTTO_VAD_MODEL_REL);
}

static int parse_float(const char *s, float *out) {
    if (strcmp(s, "none") == 0) {
        *out = NAN;
        return 0;
    }
    char *end;
    float v = strtof(s, &end);
    if (end == s || *end) return -1;
    *out = v;
    return 0;
}

static int parse_int(const char *s, int lo, int hi, int *out) {
    char *end;
    long v = strtol(s, &end, 10);
    if (end == s || *end || v < lo || v > hi) return -1;
    *out = (int)v;
    return 0;
}

static int parse_temps(const char *s, sotto_transcribe_opts *t) {
    t->n_temperatures = 0;
    const char *p = s;
    while (*p) {
        char *end;
        float v = strtof(p, &end);
        if (end == p || v < 0 || v > 5 || t->n_temperatures == SOTTO_MAX_TEMPERATURES) return -1;
        t->temperatures[t->n_temperatures++] = v;
        p = end;
        if (*p == ',') p++;
        else if (*p) return -1;
    }
    return t->n_temperatures ? 0 : -1;
}

enum {
    OPT_LANGUAGE = 1, OPT_TASK, OPT_BEAM, OPT_BEST_OF, OPT_TEMPERATURE, OPT_PATIENCE,
    OPT_LENGTH_PENALTY, OPT_NO_SPEECH, OPT_LOG_PROB, OPT_COMPRESSION, OPT_NO_CONDITION,
    OPT_INITIAL_PROMPT, OPT_PREFIX, OPT_NO_TIMESTAMPS, OPT_MAX_NEW_TOKENS, OPT_FORMAT,
    OPT_VAD_MODEL, OPT_NO_VAD, OPT_NO_GUARDRAILS, OPT_PROGRESS, OPT_NO_PROGRESS, OPT_LOG_LEVEL
};

static const struct option k_longopts[] = {
    CLI_MODEL_LONGOPTS,
    {"language", required_argument, NULL, OPT_LANGUAGE},
    {"task", required_argument, NULL, OPT_TASK},
    {"beam", required_argument, NULL, OPT_BEAM},
    {"best-of", required_argument, NULL, OPT_BEST_OF},
    {"temperature", required_argument, NULL, OPT_TEMPERATURE},
    {"patience", required_argument, NULL, OPT_PATIENCE},
    {"length-penalty", required_argument, NULL, OPT_LENGTH_PENALTY},
    {"no-speech-threshold", required_argument, NULL, OPT_NO_SPEECH},
    {"log-prob-threshold", required_argument, NULL, OPT_LOG_PROB},
    {"compression-ratio-threshold", required_argument, NULL, OPT_COMPRESSION},
    {"no-condition", no_argument, NULL, OPT_NO_CONDITION},
    {"initial-prompt", required_argument, NULL, OPT_INITIAL_PROMPT},
    {"prefix", required_argument, NULL, OPT_PREFIX},
    {"no-timestamps", no_argument, NULL, OPT_NO_TIMESTAMPS},
    {"max-new-tokens", required_argument, NULL, OPT_MAX_NEW_TOKENS},
    {"format", required_argument, NULL, OPT_FORMAT},
    {"output", required_argument, NULL, 'o'},
    {"vad-model", required_argument, NULL, OPT_VAD_MODEL},
    {"no-vad", no_argument, NULL, OPT_NO_VAD},
    {"no-guardrails", no_argument, NULL, OPT_NO_GUARDRAILS},
    {"progress", no_argument, NULL, OPT_PROGRESS},
    {"no-progress", no_argument, NULL, OPT_NO_PROGRESS},
    {"log-level", required_argument, NULL, OPT_LOG_LEVEL},
    {"help", no_argument, NULL, 'h'},
    {NULL, 0, NULL, 0}};

/* getopt_long over argv (options anywhere, `--` ends them; the files are
 * left at argv[optind..]). Returns the index of the first file, -1 (usage
 * error, message on stderr) or -2 (help). */
static int parse_args(int argc, char **argv, cli_opts *o) {
    optind = 1;
    opterr = 0;
    int c, li = -1;
    while ((c = getopt_long(argc, argv, ":ho:", k_longopts, &li)) != -1) {
        const char *v = optarg;
        int r = cli_model_opt(c, v, &o->m, "transcribe");
        if (r < 0) return -1;
        if (r > 0) {
            li = -1;
            continue;
        }
        switch (c) {
        case 'h': return -2;
        case '?':
        case ':': return cli_opt_error(c, argc, argv, "transcribe");
        case OPT_LANGUAGE: o->t.language = v; break;
        case OPT_TASK:
            if (strcmp(v, "transcribe") == 0) o->t.task = SOTTO_TASK_TRANSCRIBE;
            else if (strcmp(v, "translate") == 0) o->t.task = SOTTO_TASK_TRANSLATE;
            else goto bad;
            break;
        case OPT_BEAM: if (parse_int(v, 1, 32, &o->t.beam_size)) goto bad; break;
        case OPT_BEST_OF: if (parse_int(v, 1, 32, &o->t.best_of)) goto bad; break;
        case OPT_TEMPERATURE: if (parse_temps(v, &o->t)) goto bad; break;
        case OPT_PATIENCE: if (parse_float(v, &o->t.patience) || !(o->t.patience > 0)) goto bad; break;
        case OPT_LENGTH_PENALTY:
            if (parse_float(v, &o->t.length_penalty) || !(o->t.length_penalty >= 0)) goto bad;
            break;
        case OPT_NO_SPEECH: if (parse_float(v, &o->t.no_speech_threshold)) goto bad; break;
        case OPT_LOG_PROB: if (parse_float(v, &o->t.log_prob_threshold)) goto bad; break;
        case OPT_COMPRESSION:
            if (parse_float(v, &o->t.compression_ratio_threshold)) goto bad;
            if (isnan(o->t.compression_ratio_threshold)) o->t.compression_ratio_threshold = 0;
            break;
        case OPT_NO_CONDITION: o->t.condition_on_previous_text = 0; break;
        case OPT_INITIAL_PROMPT: o->t.initial_prompt = v; break;
        case OPT_PREFIX: o->t.prefix = v; break;
        case OPT_NO_TIMESTAMPS: o->t.without_timestamps = 1; break;
        case OPT_MAX_NEW_TOKENS: if (parse_int(v, 1, 448, &o->t.max_new_tokens)) goto bad; break;
        case OPT_FORMAT:
            if (strcmp(v, "text") == 0) o->fmt = FMT_TEXT;
            else if (strcmp(v, "txt") == 0) o->fmt = FMT_TXT;
            else if (strcmp(v, "json") == 0) o->fmt = FMT_JSON;
            else if (strcmp(v, "srt") == 0) o->fmt = FMT_SRT;
            else if (strcmp(v, "vtt") == 0) o->fmt = FMT_VTT;
            else goto bad;
            break;
        case 'o': o->output = v; break;
        case OPT_VAD_MODEL: o->vad_model = v; break;
        case OPT_NO_VAD: o->no_vad = 1; break;
        case OPT_NO_GUARDRAILS: o->t.no_repetition_guard = 1; break;
        case OPT_PROGRESS: o->progress = 1; break;
        case OPT_NO_PROGRESS: o->progress = 0; break;
        case OPT_LOG_LEVEL: {
            sotto_log_level lv;
            if (sotto_log_parse_level(v, &lv)) goto bad;
            sotto_log_set_level(lv);
            break;
        }
        default: return cli_opt_error('?', argc, argv, "transcribe");
        }
        li = -1;
        continue;
    bad:
        fprintf(stderr, "sotto transcribe: bad value '%s' for %s%s\n", v, li >= 0 ? "--" : "-o",
                li >= 0 ? k_longopts[li].name : "");
        return -1;
    }
    return optind;
}

/* ---- output ------------------------------------------------------------- */

static void fmt_time(char *buf, size_t n, double t, int always_hours, char sep) {
    if (t < 0) t = 0;
    long ms = lround(t * 1000.0);
    long h = ms / 3600000, m = ms / 60000 % 60, s = ms / 1000 % 60;
    if (always_hours || h > 0)
        snprintf(buf, n, "%02ld:%02ld:%02ld%c%03ld", h, m, s, sep, ms % 1000);
    else
        snprintf(buf, n, "%02ld:%02ld%c%03ld", m, s, sep, ms % 1000);
}

static const char *lstrip(const char *s) {
    while (*s == ' ') s++;
    return s;
}

static int write_json(FILE *f, const char *file, const sotto_transcript *t, double wall_s) {
    cJSON *o = cJSON_CreateObject();
    if (!o) return -1;
    cJSON_AddStringToObject(o, "file", file);
    cJSON_AddStringToObject(o, "language", t->language);
    cJSON_AddNumberToObject(o, "language_probability", t->language_prob);
    cJSON_AddNumberToObject(o, "duration", t->duration);
    cJSON_AddNumberToObject(o, "wall_seconds", wall_s);
    size_t total = 1;
    for (int i = 0; i < t->n_segments; i++) total += strlen(t->segments[i].text);
    char *text = malloc(total);
    if (text) {
        text[0] = '\0';
        for (int i = 0; i < t->n_segments; i++) strcat(text, t->segments[i].text);
        cJSON_AddStringToObject(o, "text", text);
        free(text);
    }
    cJSON *segs = cJSON_AddArrayToObject(o, "segments");
    for (int i = 0; i < t->n_segments; i++) {
        const sotto_segment *s = &t->segments[i];
        cJSON *j = cJSON_CreateObject();
        cJSON_AddNumberToObject(j, "id", i + 1);
        cJSON_AddNumberToObject(j, "start", s->start);
        cJSON_AddNumberToObject(j, "end", s->end);
        cJSON_AddStringToObject(j, "text", s->text);
        cJSON *tk = cJSON_AddArrayToObject(j, "tokens");
        for (int k = 0; k < s->n_tokens; k++) cJSON_AddItemToArray(tk, cJSON_CreateNumber(s->tokens[k]));
        cJSON_AddNumberToObject(j, "avg_logprob", s->avg_logprob);
        cJSON_AddNumberToObject(j, "no_speech_prob", s->no_speech_prob);
        cJSON_AddNumberToObject(j, "temperature", s->temperature);
        cJSON_AddNumberToObject(j, "compression_ratio", s->compression_ratio);
        cJSON_AddItemToArray(segs, j);
    }
    char *str = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    if (!str) return -1;
    fprintf(f, "%s\n", str);
    free(str);
    return 0;
}

static void write_transcript(FILE *f, out_fmt fmt, const char *file, const sotto_transcript *t,
                             double wall_s) {
    char a[32], b[32];
    switch (fmt) {
    case FMT_JSON: write_json(f, file, t, wall_s); break;
    case FMT_TXT:
        for (int i = 0; i < t->n_segments; i++) fprintf(f, "%s\n", lstrip(t->segments[i].text));
        break;
    case FMT_TEXT:
        for (int i = 0; i < t->n_segments; i++) {
            fmt_time(a, sizeof a, t->segments[i].start, 0, '.');
            fmt_time(b, sizeof b, t->segments[i].end, 0, '.');
            fprintf(f, "[%s --> %s] %s\n", a, b, lstrip(t->segments[i].text));
        }
        break;
    case FMT_SRT:
        for (int i = 0; i < t->n_segments; i++) {
            fmt_time(a, sizeof a, t->segments[i].start, 1, ',');
            fmt_time(b, sizeof b, t->segments[i].end, 1, ',');
            fprintf(f, "%d\n%s --> %s\n%s\n\n", i + 1, a, b, lstrip(t->segments[i].text));
        }
        break;
    case FMT_VTT:
        fprintf(f, "WEBVTT\n\n");
        for (int i = 0; i < t->n_segments; i++) {
            fmt_time(a, sizeof a, t->segments[i].start, 1, '.');
            fmt_time(b, sizeof b, t->segments[i].end, 1, '.');
            fprintf(f, "%s --> %s\n%s\n\n", a, b, lstrip(t->segments[i].text));
        }
        break;
    }
    fflush(f);
}

static void on_progress(void *user, double done, double total) {
    const char *name = user;
    fprintf(stderr, "\r%s: %5.1f%% (%.0f / %.0f s)%s", name, total > 0 ? 100.0 * done / total : 100.0,
            done, total, done >= total ? "\n" : "");
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

int sotto_cmd_transcribe(int argc, char **argv) {
    cli_opts o;
    memset(&o, 0, sizeof o);
    cli_model_opts_init(&o.m);
    o.m.mp.device = SOTTO_DEVICE_AUTO; /* a usable GPU when there is one (docs/gpu/) */
    o.progress = -1;
    o.t = sotto_transcribe_default_opts();
    int first = parse_args(argc, argv, &o);
    if (first == -2) {
        usage(stdout);
        return 0;
    }
    if (first < 0) return 2;
    if (first >= argc) {
        fprintf(stderr, "sotto transcribe: no input file\n");
        usage(stderr);
        return 2;
    }
    sotto_threads_set(o.m.threads);
    FILE *out = stdout;
    if (o.output && !(out = fopen(o.output, "w"))) {
        fprintf(stderr, "sotto transcribe: cannot write %s\n", o.output);
        return 1;
    }
    sotto_err err;
    sotto_err_clear(&err);
    double t0 = now_s();
    sotto_model *model = sotto_model_load(o.m.model, &o.m.mp, &err);
    if (!model) {
        fprintf(stderr, "sotto transcribe: cannot load model: %s\n", err.msg);
        if (out != stdout) fclose(out);
        return 1;
    }
    sotto_silero_model *vad = NULL;
    if (!o.no_vad) {
        char buf[4096];
        const char *path = o.vad_model ? o.vad_model : sotto_vad_model_default(buf, sizeof buf);
        if (path && !(vad = sotto_silero_load(path, &err))) {
            fprintf(stderr, "sotto transcribe: cannot load the VAD model: %s\n", err.msg);
            sotto_model_free(model);
            if (out != stdout) fclose(out);
            return 1;
        }
        if (!path)
            SOTTO_INFO("no Silero VAD model at %s (scripts/fetch_models.sh fetches it): every "
                       "window is decoded", buf);
    }
    o.t.vad = vad;
    char policy[512];
    sotto_model_policy_string(model, policy, sizeof policy);
    SOTTO_INFO("model %s loaded in %.2f s: %.1f MB of weights (%s), peak RSS %.1f MB", o.m.model,
               now_s() - t0, sotto_model_weight_bytes(model) / 1e6, policy,
               sotto_model_load_peak_rss(model) / 1e6);
    int status = 0;
    int progress = o.progress < 0 ? isatty(STDERR_FILENO) : o.progress;
    for (int i = first; i < argc; i++) {
        const char *file = argv[i];
        sotto_audio audio;
        if (sotto_audio_load_16k(file, &audio, &err)) {
            fprintf(stderr, "sotto transcribe: %s\n", err.msg);
            status = 1;
            continue;
        }
        sotto_transcribe_opts t = o.t;
        double dur = (double)audio.n / SOTTO_SAMPLE_RATE;
        if (progress && dur > SOTTO_CHUNK_SECONDS) {
            t.on_progress = on_progress;
            t.user = (void *)file;
        }
        sotto_transcript tr;
        double t1 = now_s();
        int rc = sotto_transcribe(model, audio.samples, audio.n, &t, &tr, &err);
        double wall = now_s() - t1;
        sotto_audio_free(&audio);
        if (rc) {
            fprintf(stderr, "sotto transcribe: %s: %s\n", file, err.msg);
            status = 1;
            continue;
        }
        SOTTO_INFO("%s: %.1f s of audio in %.2f s (%.1fx real time)", file, dur, wall,
                   wall > 0 ? dur / wall : 0.0);
        write_transcript(out, o.fmt, file, &tr, wall);
        sotto_transcript_free(&tr);
    }
    sotto_model_free(model);
    sotto_silero_model_free(vad);
    if (out != stdout && fclose(out) != 0) {
        fprintf(stderr, "sotto transcribe: error writing %s\n", o.output);
        status = 1;
    }
    return status;
}
