/* options.c - sotto-server's command line and optional JSON config file.
 * Command-line options override the config file's values. */
#define _POSIX_C_SOURCE 200809L
#include "server.h"

#include "log.h"
#include "mapfile.h"
#include "vad_model.h"

#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void usage(FILE *f) {
    fprintf(f,
            "usage: sotto-server [options]\n"
            "\n"
            "  --host ADDR            listen address (default: all)\n"
            "  --port N               port for HTTP and WebSocket (default 8765)\n"
            "  --model DIR            a model directory; repeat for several (default models/tiny.en)\n"
            "  --weights LIST         weight variants sessions may use (default f32,f16,bf16,q8,nf4,nvfp4)\n"
            "  --default-weights F    variant for sessions that do not choose (default auto: the\n"
            "                         first of --weights when given, else the checkpoint's own\n"
            "                         precision: f16 for a float16 CTranslate2 model)\n"
            "  --stream-weights F     variant for live sessions that do not choose (default auto:\n"
            "                         q8 on a CPU with the int8 dot product (AVX512-VNNI) when\n"
            "                         neither --weights nor --default-weights is given and no GPU\n"
            "                         is used, else the default weights); uploads keep those\n"
            "  --memory-budget-mb N   resident weights of all variants (default 0: no limit)\n"
            "  --max-sessions N       sessions started and connected at once (default 16)\n"
            "  --max-connections N    WebSocket connections at once, viewers included (default 1024)\n"
            "  --max-connections-per-ip N  ... from one client address (default 256)\n"
            "  --max-detached N       sessions kept without a connection, for resume or a finished\n"
            "                         feed's captions; the oldest goes when more (default 16)\n"
            "  --start-timeout-s S    a connection that has not started or resumed a session by\n"
            "                         then is closed (default 5)\n"
            "  --idle-timeout-s S     a running session whose client completes no message for this\n"
            "                         long is closed (default 30)\n"
            "  --max-buffer-s S       audio a session may have waiting for transcription (default 60)\n"
            "  --resume-grace-s S     how long a disconnected session waits for its client (default 30)\n"
            "  --idle-unload-s S      unload variants unused this long (default 300)\n"
            "  --drain-s S            on SIGTERM, time running sessions get to finish (default 30)\n"
            "  --max-frame-bytes N    largest WebSocket message (default 1048576)\n"
            "  --threads N            CPU threads for inference (default: all cores)\n"
            "  --device D             cpu | auto | cuda: where models run (default auto:\n"
            "                         uses a GPU when one is usable, else the CPU)\n"
            "  --max-batch N          sessions decoded together (default 8)\n"
            "  --overload-wait-ms MS  a due pass that waits longer (times the step scale) means\n"
            "                         the worker is behind: every session's step grows, up to\n"
            "                         4x, then new sessions get `overloaded` (default 1000)\n"
            "  --audio-ctx M          full | partials | all: which passes encode only the audio\n"
            "                         they hold instead of a 30 s window (default partials:\n"
            "                         final passes keep the whole window; docs/PERF.md)\n"
            "  --audio-ctx-pad-ms MS  padding kept after the audio of a cut partial window, which\n"
            "                         is then rounded up to whole seconds (default 1000)\n"
            "  --final-ctx-pad-ms MS  with --audio-ctx all, the padding a final pass keeps after\n"
            "                         its audio (default 3000)\n"
            "  --final-ctx-min-ms MS  with --audio-ctx all, the least a final pass encodes\n"
            "                         (default 10000)\n"
            "  --speculate-ms MS      after this much silence in an utterance, its final pass\n"
            "                         runs before the VAD ends it (silence_ms), so the final\n"
            "                         comes as the utterance ends; 0: off (default 400)\n"
            "  --speculate-load-ms MS the same while the server is behind (steps stretched):\n"
            "                         later, so that fewer guesses are wasted; 0: none then\n"
            "                         (default 600)\n"
            "  --final-beam N         beam size of final passes at temperature 0 (the offline CLI's\n"
            "                         beam search); 1: greedy. While the server is behind (steps\n"
            "                         stretched), finals are greedy. Measured, not the default:\n"
            "                         docs/PERF.md (default 1)\n"
            "  --web DIR              static files served at / (default: the repository's web/)\n"
            "  --tls-cert FILE --tls-key FILE   serve https/wss\n"
            "  --api-key KEY          a key every endpoint but /healthz, /metrics, /v1/info and feed\n"
            "                         viewers then needs (docs/SECURITY.md); repeat for several;\n"
            "                         with none the server is open\n"
            "  --api-keys-file FILE   keys, one per line\n"
            "  --max-upload-mb N      largest file for /v1/audio/transcriptions (default 25)\n"
            "  --max-upload-s N       longest audio an upload may decode to (default 3600)\n"
            "  --batch-queue N        uploads queued or running at once (default 8)\n"
            "  --batch-threads N      CPU threads of the upload transcriber (default 1)\n"
            "  --vad K                silero | energy: the sessions' default VAD (default silero\n"
            "                         when its model is present, else energy)\n"
            "  --vad-model FILE       Silero VAD weights (default " SOTTO_VAD_MODEL_REL ")\n"
            "  --redis URL            redis://HOST[:PORT][/DB] or unix:PATH: checkpoint sessions\n"
            "                         there, so that a resume may land on any instance sharing it\n"
            "                         (default: none, sessions live in this process only)\n"
            "  --instance NAME        this instance's name in /metrics and logs (default: host:port)\n"
            "  --log-level L          debug | info | warn | error (default info)\n"
            "  --config FILE          JSON with the same settings (keys without the dashes,\n"
            "                         \"model\" may be a list); the command line overrides it\n");
}

void srv_options_default(srv_options *o) {
    memset(o, 0, sizeof *o);
    o->port = 8765;
    for (int i = 0; i < SOTTO_WFMT_COUNT; i++) o->allowed[i] = 1;
    o->default_weights = SOTTO_WFMT_DEFAULT; /* auto: resolved in main.c */
    o->first_listed = SOTTO_WFMT_DEFAULT;
    o->stream_weights = SOTTO_WFMT_DEFAULT; /* auto: resolved in main.c */
    o->device = SOTTO_DEVICE_AUTO; /* a usable GPU when there is one (docs/gpu/) */
    o->max_sessions = 16;
    o->max_connections = 1024;
    o->max_connections_per_ip = 256;
    o->max_detached = 16;
    o->start_timeout_s = 5;
    o->idle_timeout_s = 30;
    o->max_buffer_s = 60;
    o->resume_grace_s = 30;
    o->idle_unload_s = 300;
    o->drain_s = 30;
    o->max_frame_bytes = 1 << 20;
    o->max_batch = 8;
    o->overload_wait_ms = 1000;
    o->audio_ctx = SRV_AUDIO_CTX_PARTIALS;
    o->audio_ctx_pad_ms = 1000;
    o->final_ctx_pad_ms = 3000;
    o->final_ctx_min_ms = 10000;
    o->speculate_ms = 400;
    o->speculate_load_ms = 600;
    o->final_beam = 1;
    o->vad_kind = SOTTO_VAD_SILERO;
    o->max_upload_mb = 25;
    o->max_upload_s = 3600;
    o->batch_queue = 8;
    o->batch_threads = 1;
    o->log_level = SOTTO_LOG_INFO;
}

void srv_options_free(srv_options *o) {
    for (int i = 0; i < o->n_models; i++) free(o->model_dirs[i]);
    o->n_models = 0;
    for (int i = 0; i < o->n_api_keys; i++) free(o->api_keys[i]);
    o->n_api_keys = 0;
}

static int add_key(srv_options *o, const char *k) {
    size_t n = strlen(k);
    if (n < 8 || n > 256 || strpbrk(k, " \t\r\n,")) {
        fprintf(stderr, "sotto-server: an API key is 8..256 bytes without spaces or commas\n");
        return -1;
    }
    if (o->n_api_keys == SRV_MAX_API_KEYS) {
        fprintf(stderr, "sotto-server: at most %d API keys\n", SRV_MAX_API_KEYS);
        return -1;
    }
    if (!(o->api_keys[o->n_api_keys] = strdup(k))) return -1;
    o->n_api_keys++;
    return 0;
}

static int load_keys(srv_options *o, const char *path) {
    char *text = NULL;
    sotto_err err;
    if (sotto_read_file(path, 1 << 20, &text, NULL, &err)) {
        fprintf(stderr, "sotto-server: %s\n", err.msg);
        return -1;
    }
    int rc = 0;
    for (char *save = NULL, *t = strtok_r(text, "\r\n", &save); t && !rc; t = strtok_r(NULL, "\r\n", &save))
        if (*t && *t != '#') rc = add_key(o, t);
    free(text);
    return rc;
}

/* Directory next to the executable ("../<rel>"), if it exists. */
static int beside_exe(const char *rel, char *out, size_t outsz) {
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) return 0;
    exe[n] = '\0';
    char *slash = strrchr(exe, '/');
    if (!slash) return 0;
    *slash = '\0';
    struct stat st;
    if (snprintf(out, outsz, "%s/../%s", exe, rel) >= (int)outsz) return 0;
    return stat(out, &st) == 0 && S_ISDIR(st.st_mode);
}

/* A weight format or "auto" (SOTTO_WFMT_DEFAULT, resolved in main.c). */
static int weights_or_auto(const char *val, sotto_wfmt *out) {
    if (!strcmp(val, "auto")) {
        *out = SOTTO_WFMT_DEFAULT;
        return 0;
    }
    if (sotto_wfmt_parse(val, out)) {
        fprintf(stderr, "sotto-server: unknown weight format '%s'\n", val);
        return -1;
    }
    return 0;
}

static int set(srv_options *o, const char *key, const char *val) {
    char *end = NULL;
    double d = val ? strtod(val, &end) : 0;
    int num_ok = val && end != val && *end == '\0';
#define NUM(name, field, lo, hi)                                                              \
    if (!strcmp(key, name)) {                                                                 \
        if (!num_ok || d < (lo) || d > (hi)) {                                                \
            fprintf(stderr, "sotto-server: %s needs a number in %g..%g\n", name, (double)(lo), \
                    (double)(hi));                                                            \
            return -1;                                                                        \
        }                                                                                     \
        o->field = d;                                                                         \
        return 0;                                                                             \
    }
    NUM("port", port, 0, 65535)
    NUM("memory-budget-mb", memory_budget_mb, 0, 1e7)
    NUM("max-sessions", max_sessions, 1, 100000)
    NUM("max-connections", max_connections, 1, 100000)
    NUM("max-connections-per-ip", max_connections_per_ip, 1, 100000)
    NUM("max-detached", max_detached, 0, 100000)
    NUM("start-timeout-s", start_timeout_s, 0.5, 3600)
    NUM("idle-timeout-s", idle_timeout_s, 1, 86400)
    NUM("max-buffer-s", max_buffer_s, 30, 3600)
    NUM("resume-grace-s", resume_grace_s, 0, 3600)
    NUM("idle-unload-s", idle_unload_s, 1, 1e6)
    NUM("drain-s", drain_s, 0, 3600)
    NUM("max-frame-bytes", max_frame_bytes, 1024, 1 << 30)
    NUM("threads", threads, 0, 1024)
    NUM("max-batch", max_batch, 1, 16)
    NUM("overload-wait-ms", overload_wait_ms, 20, 600000)
    NUM("audio-ctx-pad-ms", audio_ctx_pad_ms, 0, 30000)
    NUM("final-ctx-pad-ms", final_ctx_pad_ms, 0, 30000)
    NUM("final-ctx-min-ms", final_ctx_min_ms, 0, 30000)
    NUM("speculate-ms", speculate_ms, 0, 10000)
    NUM("speculate-load-ms", speculate_load_ms, 0, 10000)
    NUM("final-beam", final_beam, 1, SRV_BEAM_MAX)
    NUM("max-upload-mb", max_upload_mb, 0.01, 2000)
    NUM("max-upload-s", max_upload_s, 1, 86400)
    NUM("batch-queue", batch_queue, 1, 1000)
    NUM("batch-threads", batch_threads, 1, 1024)
#undef NUM
    if (!val) {
        fprintf(stderr, "sotto-server: %s needs a value\n", key);
        return -1;
    }
    if (!strcmp(key, "host")) {
        snprintf(o->host, sizeof o->host, "%s", val);
    } else if (!strcmp(key, "model")) {
        if (o->n_models == SRV_MAX_MODELS) {
            fprintf(stderr, "sotto-server: at most %d models\n", SRV_MAX_MODELS);
            return -1;
        }
        o->model_dirs[o->n_models++] = strdup(val);
    } else if (!strcmp(key, "weights")) {
        int allowed[SOTTO_WFMT_COUNT] = {0};
        sotto_wfmt first = SOTTO_WFMT_DEFAULT;
        char buf[256];
        snprintf(buf, sizeof buf, "%s", val);
        for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
            sotto_wfmt w;
            if (sotto_wfmt_parse(t, &w)) {
                fprintf(stderr, "sotto-server: unknown weight format '%s'\n", t);
                return -1;
            }
            if (first == SOTTO_WFMT_DEFAULT) first = w;
            allowed[w] = 1;
        }
        memcpy(o->allowed, allowed, sizeof allowed);
        o->first_listed = first;
    } else if (!strcmp(key, "default-weights")) {
        return weights_or_auto(val, &o->default_weights);
    } else if (!strcmp(key, "stream-weights")) {
        return weights_or_auto(val, &o->stream_weights);
    } else if (!strcmp(key, "device")) {
        if (sotto_device_parse(val, &o->device)) {
            fprintf(stderr, "sotto-server: unknown device '%s' (cpu, auto or cuda)\n", val);
            return -1;
        }
    } else if (!strcmp(key, "audio-ctx")) {
        if (!strcmp(val, "full")) o->audio_ctx = SRV_AUDIO_CTX_FULL;
        else if (!strcmp(val, "partials")) o->audio_ctx = SRV_AUDIO_CTX_PARTIALS;
        else if (!strcmp(val, "all")) o->audio_ctx = SRV_AUDIO_CTX_ALL;
        else {
            fprintf(stderr, "sotto-server: unknown --audio-ctx '%s' (full, partials or all)\n", val);
            return -1;
        }
    } else if (!strcmp(key, "web")) {
        snprintf(o->web_dir, sizeof o->web_dir, "%s", val);
    } else if (!strcmp(key, "tls-cert")) {
        snprintf(o->tls_cert, sizeof o->tls_cert, "%s", val);
    } else if (!strcmp(key, "tls-key")) {
        snprintf(o->tls_key, sizeof o->tls_key, "%s", val);
    } else if (!strcmp(key, "api-key")) {
        return add_key(o, val);
    } else if (!strcmp(key, "api-keys-file")) {
        return load_keys(o, val);
    } else if (!strcmp(key, "vad")) {
        if (!strcmp(val, "silero")) o->vad_kind = SOTTO_VAD_SILERO;
        else if (!strcmp(val, "energy")) o->vad_kind = SOTTO_VAD_ENERGY;
        else {
            fprintf(stderr, "sotto-server: unknown VAD '%s' (silero or energy)\n", val);
            return -1;
        }
        o->vad_kind_set = 1;
    } else if (!strcmp(key, "vad-model")) {
        snprintf(o->vad_model, sizeof o->vad_model, "%s", val);
    } else if (!strcmp(key, "redis")) {
        if (strlen(val) >= sizeof o->redis_url) {
            fprintf(stderr, "sotto-server: --redis URL too long\n");
            return -1;
        }
        snprintf(o->redis_url, sizeof o->redis_url, "%s", val);
    } else if (!strcmp(key, "instance")) {
        if (!*val || strlen(val) >= sizeof o->instance || strspn(val, "abcdefghijklmnopqrstuvwxyz"
                                                                     "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.") != strlen(val)) {
            fprintf(stderr, "sotto-server: --instance needs 1..63 of [A-Za-z0-9._-]\n");
            return -1;
        }
        snprintf(o->instance, sizeof o->instance, "%s", val);
    } else if (!strcmp(key, "log-level")) {
        sotto_log_level lv;
        if (sotto_log_parse_level(val, &lv)) {
            fprintf(stderr, "sotto-server: unknown log level '%s'\n", val);
            return -1;
        }
        o->log_level = (int)lv;
    } else {
        fprintf(stderr, "sotto-server: unknown option '%s'\n", key);
        return -1;
    }
    return 0;
}

static int load_config(srv_options *o, const char *path) {
    char *text = NULL;
    sotto_err err;
    if (sotto_read_file(path, 1 << 20, &text, NULL, &err)) {
        fprintf(stderr, "sotto-server: %s\n", err.msg);
        return -1;
    }
    cJSON *root = cJSON_Parse(text);
    free(text);
    if (!cJSON_IsObject(root)) {
        fprintf(stderr, "sotto-server: %s: not a JSON object\n", path);
        cJSON_Delete(root);
        return -1;
    }
    int rc = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, root) {
        char buf[64];
        if (cJSON_IsArray(it) && !strcmp(it->string, "model")) {
            const cJSON *m;
            cJSON_ArrayForEach(m, it) rc |= cJSON_IsString(m) ? set(o, "model", m->valuestring) : -1;
        } else if (cJSON_IsString(it)) {
            rc |= set(o, it->string, it->valuestring);
        } else if (cJSON_IsNumber(it)) {
            snprintf(buf, sizeof buf, "%.17g", it->valuedouble);
            rc |= set(o, it->string, buf);
        } else {
            fprintf(stderr, "sotto-server: %s: bad value for \"%s\"\n", path, it->string);
            rc = -1;
        }
    }
    cJSON_Delete(root);
    return rc ? -1 : 0;
}

/* Every option takes a value; the config file's keys are the same names. */
static const char *const k_keys[] = {
    "port", "memory-budget-mb", "max-sessions", "max-connections", "max-connections-per-ip",
    "max-detached", "start-timeout-s", "idle-timeout-s", "max-buffer-s", "resume-grace-s",
    "idle-unload-s", "drain-s", "max-frame-bytes", "threads", "max-batch", "overload-wait-ms",
    "audio-ctx-pad-ms", "audio-ctx", "final-ctx-pad-ms", "final-ctx-min-ms",
    "speculate-ms", "speculate-load-ms", "final-beam", "max-upload-mb",
    "max-upload-s", "batch-queue", "batch-threads", "host", "model", "weights",
    "default-weights", "stream-weights", "device", "web", "tls-cert", "tls-key", "api-key", "api-keys-file", "vad",
    "vad-model", "log-level", "redis", "instance", "config"};
#define N_KEYS ((int)(sizeof k_keys / sizeof k_keys[0]))
#define KEY_CODE 0x100 /* getopt_long returns KEY_CODE + index into k_keys */

/* getopt_long over argv: --key VALUE or --key=VALUE, -- ends the options,
 * unknown options and missing values named. */
int srv_options_parse(srv_options *o, int argc, char **argv) {
    struct option lo[N_KEYS + 2];
    int config = -1;
    for (int k = 0; k < N_KEYS; k++) {
        lo[k] = (struct option){k_keys[k], required_argument, NULL, KEY_CODE + k};
        if (!strcmp(k_keys[k], "config")) config = k;
    }
    lo[N_KEYS] = (struct option){"help", no_argument, NULL, 'h'};
    lo[N_KEYS + 1] = (struct option){NULL, 0, NULL, 0};
    opterr = 0;
    int c;
    /* the config file first, so flags override it (errors are reported below) */
    optind = 1;
    while ((c = getopt_long(argc, argv, ":h", lo, NULL)) != -1)
        if (c == KEY_CODE + config && load_config(o, optarg)) return -1;
    int cfg_models = o->n_models;
    optind = 0; /* glibc: start over (argv may have been permuted) */
    while ((c = getopt_long(argc, argv, ":h", lo, NULL)) != -1) {
        if (c == 'h') {
            usage(stdout);
            return 1;
        }
        if (c == ':' || c == '?') {
            const char *el = optind - 1 >= 1 && optind - 1 < argc ? argv[optind - 1] : "?";
            if (c == ':')
                fprintf(stderr, "sotto-server: %s needs a value\n", el);
            else if (optopt)
                fprintf(stderr, "sotto-server: unknown option '-%c'\n", optopt);
            else
                fprintf(stderr, "sotto-server: unknown option '%s'\n", el);
            usage(stderr);
            return -1;
        }
        const int k = c - KEY_CODE;
        if (k == config) continue;
        const char *key = k_keys[k];
        if (!strcmp(key, "model") && cfg_models) { /* the command line replaces the file's list */
            for (int m = 0; m < cfg_models; m++) free(o->model_dirs[m]);
            memmove(o->model_dirs, o->model_dirs + cfg_models,
                    sizeof(char *) * (size_t)(o->n_models - cfg_models));
            o->n_models -= cfg_models;
            cfg_models = 0;
        }
        if (set(o, key, optarg)) return -1;
    }
    if (optind < argc) {
        fprintf(stderr, "sotto-server: unexpected argument '%s'\n", argv[optind]);
        usage(stderr);
        return -1;
    }
    if (o->n_models == 0) {
        char buf[PATH_MAX];
        const char *env = getenv("SOTTO_MODEL");
        if (env && *env)
            o->model_dirs[o->n_models++] = strdup(env);
        else
            o->model_dirs[o->n_models++] = strdup(beside_exe("models/tiny.en", buf, sizeof buf)
                                                      ? buf
                                                      : "models/tiny.en");
    }
    if (!o->web_dir[0]) {
        char buf[sizeof o->web_dir];
        snprintf(o->web_dir, sizeof o->web_dir, "%s", beside_exe("web", buf, sizeof buf) ? buf : "web");
    }
    if (o->default_weights != SOTTO_WFMT_DEFAULT && !o->allowed[o->default_weights]) {
        fprintf(stderr, "sotto-server: the default weights %s are not in --weights\n",
                sotto_wfmt_name(o->default_weights));
        return -1;
    }
    if (o->stream_weights != SOTTO_WFMT_DEFAULT && !o->allowed[o->stream_weights]) {
        fprintf(stderr, "sotto-server: the stream weights %s are not in --weights\n",
                sotto_wfmt_name(o->stream_weights));
        return -1;
    }
    if (!o->tls_cert[0] != !o->tls_key[0]) {
        fprintf(stderr, "sotto-server: --tls-cert and --tls-key go together\n");
        return -1;
    }
    for (int i = 0; i < o->n_models; i++)
        if (!o->model_dirs[i]) {
            fprintf(stderr, "sotto-server: out of memory\n");
            return -1;
        }
    return 0;
}
