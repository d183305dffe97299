/* compat.c - API keys, model names and OpenAI-shaped errors for the
 * compatibility front ends (compat.h). */
#define _POSIX_C_SOURCE 200809L
#include "compat.h"

#include <libwebsockets.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

int srv_compat_authorized(srv *s, struct lws *wsi) { return srv_auth_check(s, wsi, NULL); }

/* Names hosted APIs use for their own models: they get the default model. */
static int is_alias(const char *n) {
    static const char *const k[] = {"whisper-1", "whisper", "gpt-4o-transcribe", "gpt-4o-mini-transcribe",
                                    "gpt-realtime", "gpt-4o-realtime-preview", "nova", "enhanced", "general"};
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++)
        if (!strncmp(n, k[i], strlen(k[i]))) return 1;
    return 0;
}

static int have_model(srv *s, const char *name) {
    for (int i = 0; i < s->n_models; i++)
        if (!strcmp(s->models[i].name, name)) return 1;
    return 0;
}

int srv_compat_model(srv *s, const char *name, int live, char *model, size_t model_sz,
                     sotto_wfmt *weights, char *why, size_t why_sz) {
    char buf[96];
    snprintf(buf, sizeof buf, "%s", name ? name : "");
    *weights = live ? s->opt.stream_weights : s->opt.default_weights;
    char *colon = strchr(buf, ':');
    if (colon) {
        *colon = '\0';
        if (sotto_wfmt_parse(colon + 1, weights)) {
            snprintf(why, why_sz, "unknown weights '%.32s' in the model name (f32, f16, bf16, q8, nf4, nvfp4)",
                     colon + 1);
            return -1;
        }
        if (!s->opt.allowed[*weights]) {
            snprintf(why, why_sz, "this server does not offer the weights '%s'", sotto_wfmt_name(*weights));
            return -1;
        }
    }
    const char *n = buf;
    if (!have_model(s, n) && !strncmp(n, "whisper-", 8) && have_model(s, n + 8)) n += 8;
    if (!*n || (!have_model(s, n) && is_alias(n))) {
        snprintf(model, model_sz, "%s", "");
        return 0;
    }
    if (!have_model(s, n)) {
        snprintf(why, why_sz, "The model '%.64s' does not exist on this server (GET /v1/models lists them)",
                 name);
        return -1;
    }
    snprintf(model, model_sz, "%s", n);
    return 0;
}

char *srv_openai_error_json(const char *type, const char *code, const char *param, const char *msg) {
    cJSON *o = cJSON_CreateObject();
    cJSON *e = o ? cJSON_AddObjectToObject(o, "error") : NULL;
    if (!e) {
        cJSON_Delete(o);
        return NULL;
    }
    cJSON_AddStringToObject(e, "message", msg);
    cJSON_AddStringToObject(e, "type", type);
    if (param) cJSON_AddStringToObject(e, "param", param);
    else cJSON_AddNullToObject(e, "param");
    if (code) cJSON_AddStringToObject(e, "code", code);
    else cJSON_AddNullToObject(e, "code");
    char *j = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return j;
}

int srv_b64_decode(const char *in, size_t len, unsigned char **out, size_t *out_len) {
    while (len && (in[len - 1] == '=' || in[len - 1] == '\n' || in[len - 1] == '\r')) len--;
    if (len % 4 == 1) return -1;
    unsigned char *o = malloc(len / 4 * 3 + 3);
    if (!o) return -1;
    size_t n = 0;
    uint32_t acc = 0;
    int bits = 0;
    for (size_t i = 0; i < len; i++) {
        int c = (unsigned char)in[i], v;
        if (c >= 'A' && c <= 'Z') v = c - 'A';
        else if (c >= 'a' && c <= 'z') v = c - 'a' + 26;
        else if (c >= '0' && c <= '9') v = c - '0' + 52;
        else if (c == '+' || c == '-') v = 62;
        else if (c == '/' || c == '_') v = 63;
        else {
            free(o);
            return -1;
        }
        acc = acc << 6 | (uint32_t)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            o[n++] = (unsigned char)(acc >> bits);
        }
    }
    *out = o;
    *out_len = n;
    return 0;
}

static int16_t ulaw(unsigned char u) {
    u = (unsigned char)~u;
    int t = ((u & 0x0f) << 3) + 0x84;
    t <<= (u & 0x70) >> 4;
    return (int16_t)((u & 0x80) ? 0x84 - t : t - 0x84);
}

static int16_t alaw(unsigned char a) {
    a ^= 0x55;
    int t = (a & 0x0f) << 4, seg = (a & 0x70) >> 4;
    t = seg == 0 ? t + 8 : seg == 1 ? t + 0x108 : (t + 0x108) << (seg - 1);
    return (int16_t)((a & 0x80) ? t : -t);
}

unsigned char *srv_g711_to_s16le(const unsigned char *in, size_t n, int is_alaw) {
    unsigned char *out = malloc(n * 2 + 1);
    if (!out) return NULL;
    for (size_t i = 0; i < n; i++) {
        uint16_t v = (uint16_t)(is_alaw ? alaw(in[i]) : ulaw(in[i]));
        out[2 * i] = (unsigned char)(v & 0xff);
        out[2 * i + 1] = (unsigned char)(v >> 8);
    }
    return out;
}
