/* http.c - plain HTTP on the server's port: /healthz, /metrics and the
 * static files of web/. */
#define _XOPEN_SOURCE 700 /* realpath */
#include "server.h"

#include "persist.h"

#include <libwebsockets.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int srv_http_respond(struct lws *wsi, unsigned int status, const char *type, const char *body,
                   size_t len) {
    unsigned char buf[LWS_PRE + 512], *start = buf + LWS_PRE, *p = start, *end = buf + sizeof buf;
    if (lws_add_http_common_headers(wsi, status, type, (lws_filepos_t)len, &p, end) ||
        lws_add_http_header_by_token(wsi, WSI_TOKEN_HTTP_CACHE_CONTROL,
                                     (const unsigned char *)"no-store", 8, &p, end) ||
        lws_finalize_write_http_header(wsi, start, &p, end))
        return 1;
    if (lws_hdr_total_length(wsi, WSI_TOKEN_HEAD_URI) > 0) len = 0; /* headers only */
    unsigned char *out = malloc(LWS_PRE + len + 1);
    if (!out) return 1;
    memcpy(out + LWS_PRE, body, len);
    int n = lws_write(wsi, out + LWS_PRE, len, LWS_WRITE_HTTP_FINAL);
    free(out);
    if (n < (int)len) return 1;
    return lws_http_transaction_completed(wsi) ? -1 : 0;
}

static const char *mime_of(const char *path) {
    const char *dot = strrchr(path, '.');
    static const struct {
        const char *ext, *mime;
    } k[] = {{".html", "text/html; charset=utf-8"},
             {".js", "text/javascript; charset=utf-8"},
             {".mjs", "text/javascript; charset=utf-8"},
             {".css", "text/css; charset=utf-8"},
             {".json", "application/json"},
             {".svg", "image/svg+xml"},
             {".png", "image/png"},
             {".ico", "image/x-icon"},
             {".txt", "text/plain; charset=utf-8"},
             {".wav", "audio/wav"}};
    for (size_t i = 0; dot && i < sizeof k / sizeof k[0]; i++)
        if (strcmp(dot, k[i].ext) == 0) return k[i].mime;
    return "application/octet-stream";
}

/* 405 with the Allow header; the connection closes (the request may have a
 * body that is not read). */
static int respond_405(struct lws *wsi) {
    static const char body[] = "method not allowed: this resource takes GET or HEAD\n";
    unsigned char buf[LWS_PRE + 512], *start = buf + LWS_PRE, *p = start, *end = buf + sizeof buf;
    if (lws_add_http_common_headers(wsi, 405, "text/plain", sizeof body - 1, &p, end) ||
        lws_add_http_header_by_token(wsi, WSI_TOKEN_HTTP_ALLOW, (const unsigned char *)"GET, HEAD",
                                     9, &p, end) ||
        lws_add_http_header_by_token(wsi, WSI_TOKEN_CONNECTION, (const unsigned char *)"close", 5,
                                     &p, end) ||
        lws_finalize_write_http_header(wsi, start, &p, end))
        return -1;
    unsigned char out[LWS_PRE + sizeof body];
    memcpy(out + LWS_PRE, body, sizeof body - 1);
    lws_write(wsi, out + LWS_PRE, sizeof body - 1, LWS_WRITE_HTTP_FINAL);
    return -1;
}

/* Resolves path (links, "..") into out; 0 if it lies inside root (also
 * resolved), -1 otherwise or if either does not exist. */
static int resolve_inside(const char *root, const char *path, char out[PATH_MAX]) {
    char r[PATH_MAX];
    if (!realpath(root, r) || !realpath(path, out)) return -1;
    size_t n = strlen(r);
    if (n == 1) return 0; /* the root is "/" */
    return strncmp(out, r, n) == 0 && out[n] == '/' ? 0 : -1;
}

/* The static files of --web: no "..", no hidden files, and nothing that a
 * link leads out of the web root (the resolved path is what is served). */
static int serve_static(srv *s, struct lws *wsi, const char *uri) {
    if (uri[0] != '/' || strstr(uri, "..") || strstr(uri, "/.") || strlen(uri) > 512)
        return srv_http_respond(wsi, 400, "text/plain", "bad path\n", 9);
    char path[2048], real[PATH_MAX];
    snprintf(path, sizeof path, "%s%s%s", s->opt.web_dir, uri,
             uri[strlen(uri) - 1] == '/' ? "index.html" : "");
    struct stat st;
    if (!s->opt.web_dir[0] || resolve_inside(s->opt.web_dir, path, real) != 0 ||
        stat(real, &st) != 0 || !S_ISREG(st.st_mode))
        return srv_http_respond(wsi, 404, "text/plain", "not found\n", 10);
    int n = lws_serve_http_file(wsi, real, mime_of(path), NULL, 0);
    if (n < 0 || (n > 0 && lws_http_transaction_completed(wsi))) return -1;
    return 0;
}

int srv_http_route(srv *s, struct lws *wsi, const char *uri) {
    if (!uri) uri = "/";
    int method = lws_http_get_uri_and_method(wsi, &(char *){NULL}, &(int){0});
    if (method != LWSHUMETH_GET && method != LWSHUMETH_HEAD) return respond_405(wsi);
    if (strcmp(uri, "/healthz") == 0) {
        if (atomic_load(&s->draining)) return srv_http_respond(wsi, 503, "text/plain", "draining\n", 9);
        if (!atomic_load(&s->ready)) return srv_http_respond(wsi, 503, "text/plain", "loading\n", 8);
        return srv_http_respond(wsi, 200, "text/plain", "ok\n", 3);
    }
    /* for load balancers: take new sessions here? (a 503 says why) */
    if (strcmp(uri, "/readyz") == 0) {
        if (atomic_load(&s->draining)) return srv_http_respond(wsi, 503, "text/plain", "draining\n", 9);
        if (!atomic_load(&s->ready)) return srv_http_respond(wsi, 503, "text/plain", "loading\n", 8);
        if (s->persist && !srv_persist_connected(s->persist))
            return srv_http_respond(wsi, 503, "text/plain", "redis unreachable\n", 18);
        if (atomic_load(&s->overloaded)) return srv_http_respond(wsi, 503, "text/plain", "overloaded\n", 11);
        return srv_http_respond(wsi, 200, "text/plain", "ready\n", 6);
    }
    if (strcmp(uri, "/metrics") == 0) {
        size_t len = 0;
        char *text = srv_metrics_render(s, &len);
        if (!text) return srv_http_respond(wsi, 500, "text/plain", "out of memory\n", 14);
        int rc = srv_http_respond(wsi, 200, "text/plain; version=0.0.4", text, len);
        free(text);
        return rc;
    }
    /* what this server offers, for clients' settings menus */
    if (strcmp(uri, "/v1/info") == 0) {
        cJSON *o = cJSON_CreateObject(), *models = cJSON_CreateArray(), *weights = cJSON_CreateArray();
        if (o && models && weights) {
            cJSON_AddStringToObject(o, "protocol", "sotto.v1");
            for (int i = 0; i < s->n_models; i++) { /* names, once each, default first */
                int seen = 0;
                for (int k = 0; k < i; k++) seen |= !strcmp(s->models[k].name, s->models[i].name);
                if (!seen) cJSON_AddItemToArray(models, cJSON_CreateString(s->models[i].name));
            }
            /* the live sessions' default first (a client's menu is for them) */
            cJSON_AddItemToArray(weights, cJSON_CreateString(sotto_wfmt_name(s->opt.stream_weights)));
            for (int w = 0; w < SOTTO_WFMT_COUNT; w++)
                if (s->opt.allowed[w] && w != (int)s->opt.stream_weights)
                    cJSON_AddItemToArray(weights, cJSON_CreateString(sotto_wfmt_name((sotto_wfmt)w)));
            cJSON_AddItemToObject(o, "models", models);
            cJSON_AddItemToObject(o, "weights", weights);
            models = weights = NULL;
        }
        cJSON_Delete(models);
        cJSON_Delete(weights);
        char *text = o ? cJSON_PrintUnformatted(o) : NULL;
        cJSON_Delete(o);
        if (!text) return srv_http_respond(wsi, 500, "text/plain", "out of memory\n", 14);
        int rc = srv_http_respond(wsi, 200, "application/json", text, strlen(text));
        free(text);
        return rc;
    }
    /* captions of a feed: /v1/feeds/NAME.vtt or .srt [?key=KEY] */
    size_t ul = strlen(uri);
    if (strncmp(uri, "/v1/feeds/", 10) == 0 && ul > 14 &&
        (!strcmp(uri + ul - 4, ".vtt") || !strcmp(uri + ul - 4, ".srt"))) {
        char name[SRV_FEED_NAME_MAX + 1];
        size_t nl = ul - 14;
        if (nl > SRV_FEED_NAME_MAX) return srv_http_respond(wsi, 404, "text/plain", "no such feed\n", strlen("no such feed\n"));
        memcpy(name, uri + 10, nl);
        name[nl] = 0;
        srv_session *ss = srv_feed_name_ok(name) ? srv_feed_find(s, name) : NULL;
        if (!ss) return srv_http_respond(wsi, 404, "text/plain", "no such feed\n", strlen("no such feed\n"));
        char key[SRV_FEED_NAME_MAX + 8] = "";
        const char *kv = lws_get_urlarg_by_name(wsi, "key=", key, (int)sizeof key);
        pthread_mutex_lock(&ss->lock);
        int key_ok = !ss->feed_key[0] || (kv && strcmp(kv, ss->feed_key) == 0);
        pthread_mutex_unlock(&ss->lock);
        if (!key_ok) {
            srv_session_unref(s, ss);
            return srv_http_respond(wsi, 403, "text/plain", "this feed needs its viewer key (?key=...)\n", strlen("this feed needs its viewer key (?key=...)\n"));
        }
        int vtt = !strcmp(uri + ul - 4, ".vtt");
        size_t len = 0;
        char *text = srv_feed_captions(ss, vtt, &len);
        srv_session_unref(s, ss);
        if (!text) return srv_http_respond(wsi, 500, "text/plain", "out of memory\n", 14);
        int rc = srv_http_respond(wsi, 200, vtt ? "text/vtt; charset=utf-8" : "application/x-subrip; charset=utf-8",
                         text, len);
        free(text);
        return rc;
    }
    return serve_static(s, wsi, uri);
}
