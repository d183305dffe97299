/* auth.c - API keys and short-lived client tokens (docs/SECURITY.md).
 *
 * Keys come from --api-key / --api-keys-file. A token ("ek_" + 128 random
 * bits in hex) is minted for a key by POST /v1/realtime/client_secrets and
 * stands for that key until it expires; tokens live in memory (a restart
 * forgets them) and, with --redis, in Redis too, so that every instance of
 * the fleet accepts them (fleet.c). Called on the service thread (HTTP and WebSocket
 * callbacks); the token table has its own lock all the same. */
#define _POSIX_C_SOURCE 200809L
#include "server.h"

#include "compat.h"
#include "log.h"

#include <libwebsockets.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

/* Compares without stopping at the first difference. */
static int same(const char *a, size_t alen, const char *b) {
    size_t blen = strlen(b);
    unsigned char d = (unsigned char)(alen != blen);
    for (size_t i = 0; i < blen; i++) d |= (unsigned char)((i < alen ? a[i] : 0) ^ b[i]);
    return d == 0;
}

/* Index of the key k (n bytes), or -1. Every key is compared. */
static int key_index(srv *s, const char *k, size_t n) {
    int found = -1;
    for (int i = 0; i < s->opt.n_api_keys; i++)
        if (same(k, n, s->opt.api_keys[i])) found = i;
    return found;
}

/* Keeps token v (minted here, or by another instance) for ttl_s; 0, or -1 if the table is full. */
static int token_keep(srv *s, const char *v, int ident, double ttl_s) {
    double now = srv_now();
    int slot = -1;
    pthread_mutex_lock(&s->tokens_lock);
    for (int i = 0; i < SRV_TOKENS_MAX && slot < 0; i++)
        if (!s->tokens[i].value[0] || s->tokens[i].expires <= now) slot = i;
    if (slot >= 0) {
        memcpy(s->tokens[slot].value, v, SRV_TOKEN_LEN);
        s->tokens[slot].expires = now + ttl_s;
        s->tokens[slot].ident = ident;
    }
    pthread_mutex_unlock(&s->tokens_lock);
    return slot >= 0 ? 0 : -1;
}

static int token_ident(srv *s, const char *k, size_t n) {
    if (n != 3 + 32 || strncmp(k, SRV_TOKEN_PREFIX, 3) || strspn(k + 3, "0123456789abcdef") != 32) return -1;
    double now = srv_now();
    int found = -1;
    pthread_mutex_lock(&s->tokens_lock);
    for (int i = 0; i < SRV_TOKENS_MAX; i++)
        if (s->tokens[i].value[0] && s->tokens[i].expires > now && same(k, n, s->tokens[i].value))
            found = s->tokens[i].ident;
    pthread_mutex_unlock(&s->tokens_lock);
    if (found < 0 && s->persist) { /* minted by another instance? */
        char v[SRV_TOKEN_LEN] = {0};
        memcpy(v, k, n);
        int ident;
        double left;
        if (srv_fleet_token_get(s, v, &ident, &left) == 0 && ident >= 0 && ident < s->opt.n_api_keys) {
            token_keep(s, v, ident, left);
            found = ident;
        }
    }
    return found;
}

/* The key (or, if tokens count, the token) k stands for: its key index or -1. */
static int credential(srv *s, const char *k, size_t n, int tokens) {
    int i = key_index(s, k, n);
    return i >= 0 || !tokens ? i : token_ident(s, k, n);
}

/* Tries every form a request can carry a credential in; -1 if none is valid. */
static int find_credential(srv *s, struct lws *wsi, int tokens) {
    char h[1024] = "";
    int id = -1;
    if (lws_hdr_copy(wsi, h, sizeof h, WSI_TOKEN_HTTP_AUTHORIZATION) > 0) {
        const char *k = NULL;
        if (!strncasecmp(h, "Bearer ", 7)) k = h + 7;
        if (!strncasecmp(h, "Token ", 6)) k = h + 6;
        if (k && (id = credential(s, k, strlen(k), tokens)) >= 0) return id;
    }
    /* browsers cannot set headers on a WebSocket: OpenAI's and Deepgram's subprotocol forms */
    if (lws_hdr_copy(wsi, h, sizeof h, WSI_TOKEN_PROTOCOL) > 0) {
        int after_scheme = 0;
        for (char *save = NULL, *t = strtok_r(h, ", ", &save); t; t = strtok_r(NULL, ", ", &save)) {
            const char *k = NULL;
            if (!strncmp(t, "openai-insecure-api-key.", 24)) k = t + 24;
            else if (!strncmp(t, "sotto-key.", 10)) k = t + 10;
            else if (after_scheme) k = t;
            if (k && (id = credential(s, k, strlen(k), tokens)) >= 0) return id;
            after_scheme = !strcmp(t, "token") || !strcmp(t, "bearer");
        }
    }
    static const char *const args[] = {"api_key=", "token="};
    for (size_t i = 0; i < sizeof args / sizeof args[0]; i++) {
        const char *k = lws_get_urlarg_by_name(wsi, args[i], h, (int)sizeof h);
        if (k && (id = credential(s, k, strlen(k), tokens)) >= 0) return id;
    }
    return -1;
}

int srv_auth_check(srv *s, struct lws *wsi, int *ident) {
    if (ident) *ident = -1;
    if (s->opt.n_api_keys == 0) return 1;
    int id = find_credential(s, wsi, 1);
    if (id < 0) {
        atomic_fetch_add(&s->m.auth_failures, 1);
        return 0;
    }
    if (ident) *ident = id;
    return 1;
}

int srv_auth_check_key(srv *s, struct lws *wsi, int *ident) {
    if (ident) *ident = -1;
    if (s->opt.n_api_keys == 0) return 1;
    int id = find_credential(s, wsi, 0);
    if (id < 0) {
        atomic_fetch_add(&s->m.auth_failures, 1);
        return 0;
    }
    if (ident) *ident = id;
    return 1;
}

static int random_bytes(unsigned char *b, size_t n) {
    FILE *f = fopen("/dev/urandom", "rb");
    if (!f) return -1;
    size_t got = fread(b, 1, n, f);
    fclose(f);
    return got == n ? 0 : -1;
}

int srv_token_mint(srv *s, int ident, double ttl_s, char out[SRV_TOKEN_LEN], double *expires_at) {
    unsigned char b[16];
    if (random_bytes(b, sizeof b)) return -1; /* never a guessable token */
    char v[SRV_TOKEN_LEN];
    memcpy(v, SRV_TOKEN_PREFIX, 3);
    for (size_t i = 0; i < sizeof b; i++) snprintf(v + 3 + 2 * i, 3, "%02x", b[i]);
    if (token_keep(s, v, ident, ttl_s)) return -1;
    if (s->persist && srv_fleet_token_put(s, v, ident, ttl_s))
        SOTTO_WARN("client token not stored in Redis: only this instance accepts it");
    memcpy(out, v, sizeof v);
    *expires_at = (double)time(NULL) + ttl_s;
    atomic_fetch_add(&s->m.tokens_issued, 1);
    return 0;
}

/* ---- POST /v1/realtime/client_secrets -------------------------------------------------- */

#define SECRET_BODY_MAX 16384

struct srv_secret_req {
    int ident;  /* the key that asks */
    char *body;
    size_t len;
};

static int http_json(struct lws *wsi, unsigned int status, char *json) { /* takes json */
    if (!json) return srv_http_respond(wsi, 500, "text/plain", "out of memory\n", 14);
    int rc = srv_http_respond(wsi, status, "application/json", json, strlen(json));
    free(json);
    return rc;
}

static int http_error(struct lws *wsi, unsigned int status, const char *code, const char *msg) {
    return http_json(wsi, status, srv_openai_error_json("invalid_request_error", code, NULL, msg));
}

/* The lifetime the body asks for ({"expires_after":{"anchor":"created_at","seconds":N}},
 * all optional): 0 and *ttl, or -1 if malformed. */
static int body_ttl(const char *body, size_t len, double *ttl) {
    *ttl = SRV_TOKEN_TTL_DEFAULT;
    if (!len) return 0;
    cJSON *b = cJSON_ParseWithLength(body, len);
    const cJSON *ea = b ? cJSON_GetObjectItemCaseSensitive(b, "expires_after") : NULL;
    const cJSON *sec = ea ? cJSON_GetObjectItemCaseSensitive(ea, "seconds") : NULL;
    int bad = !cJSON_IsObject(b) || (ea && !cJSON_IsObject(ea)) ||
              (sec && (!cJSON_IsNumber(sec) || sec->valuedouble < 10 || sec->valuedouble > SRV_TOKEN_TTL_MAX));
    if (!bad && sec) *ttl = sec->valuedouble;
    cJSON_Delete(b);
    return bad ? -1 : 0;
}

/* {"value":"ek_...","expires_at":UNIX,"session":{"type":"transcription"}}, as OpenAI's. */
static int secret_respond(srv *s, struct lws *wsi, int ident, const char *body, size_t len) {
    double ttl;
    if (body_ttl(body, len, &ttl))
        return http_error(wsi, 400, "invalid_value", "the body must be a JSON object; expires_after.seconds 10..7200");
    char value[SRV_TOKEN_LEN];
    double expires_at = 0;
    if (srv_token_mint(s, ident, ttl, value, &expires_at))
        return http_error(wsi, 503, "too_many_tokens", "too many live client tokens; try again later");
    cJSON *o = cJSON_CreateObject();
    cJSON *sess = o ? cJSON_AddObjectToObject(o, "session") : NULL;
    if (!sess) {
        cJSON_Delete(o);
        return http_json(wsi, 500, NULL);
    }
    cJSON_AddStringToObject(o, "value", value);
    cJSON_AddNumberToObject(o, "expires_at", (double)(long long)expires_at);
    cJSON_AddStringToObject(sess, "type", "transcription");
    char *j = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return http_json(wsi, 200, j);
}

int srv_secret_http(srv *s, struct lws *wsi, srv_secret_req **req, const char *uri) {
    if (strcmp(uri, "/v1/realtime/client_secrets") != 0) return 1;
    srv_secret_closed(req); /* a keep-alive connection's earlier request */
    if (lws_hdr_total_length(wsi, WSI_TOKEN_POST_URI) <= 0)
        return http_error(wsi, 405, "method_not_allowed", "POST a JSON body (or none) to mint a client token");
    int ident = -1;
    if (!srv_auth_check_key(s, wsi, &ident))
        return http_error(wsi, 401, "invalid_api_key",
                          "an API key is needed (Authorization: Bearer KEY); client tokens cannot mint tokens");
    char cl[32] = "";
    long n = lws_hdr_copy(wsi, cl, sizeof cl, WSI_TOKEN_HTTP_CONTENT_LENGTH) > 0 ? atol(cl) : 0;
    if (n > SECRET_BODY_MAX) return http_error(wsi, 413, "body_too_large", "the body is limited to 16 KiB");
    if (n <= 0) return secret_respond(s, wsi, ident, NULL, 0);
    if (!(*req = calloc(1, sizeof **req))) return http_json(wsi, 500, NULL);
    (*req)->ident = ident;
    return 0; /* the body follows */
}

int srv_secret_body(srv_secret_req *req, const void *in, size_t len) {
    if (req->len + len > SECRET_BODY_MAX) return -1;
    char *nb = realloc(req->body, req->len + len + 1);
    if (!nb) return -1;
    memcpy(nb + req->len, in, len);
    req->body = nb;
    req->len += len;
    return 0;
}

int srv_secret_done(srv *s, struct lws *wsi, srv_secret_req **req) {
    srv_secret_req *r = *req;
    int rc = secret_respond(s, wsi, r->ident, r->body, r->len);
    srv_secret_closed(req);
    return rc;
}

void srv_secret_closed(srv_secret_req **req) {
    if (!*req) return;
    free((*req)->body);
    free(*req);
    *req = NULL;
}
