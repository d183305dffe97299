/* batch.c - OpenAI-compatible file transcription over HTTP:
 *   POST /v1/audio/transcriptions, POST /v1/audio/translations (multipart
 *   form: file, model, language, prompt, temperature, response_format,
 *   stream, timestamp_granularities[]), GET /v1/models[/ID].
 *
 * The service thread reads the body (up to --max-upload-mb plus 64 KiB) and
 * parses the form (multipart.c) into a job; one transcriber
 * thread decodes the file and runs the offline loop (transcribe.h) with
 * --batch-threads CPU threads, so that live sessions on the inference worker
 * keep their pace; the finished response (or, with stream=true, server-sent
 * events as segments are final) goes back through the service thread.
 * Jobs are shared by the request and the thread (refs, under b->lock); a
 * client that leaves cancels its job at the next segment.
 */
#define _GNU_SOURCE /* memmem */
#include "compat.h"
#include "multipart.h"
#include "upload_audio.h"

#include "log.h"
#include "strbuf.h"
#include "subtitle.h"
#include "transcribe.h"

#include <libwebsockets.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum { RF_JSON, RF_TEXT, RF_SRT, RF_VTT, RF_VERBOSE } resp_fmt;

typedef struct batch_job {
    struct batch_job *next; /* b->jobs */
    srv *srv;
    int refs;               /* the request and the thread (b->lock) */
    struct lws *wsi;        /* NULL once the client left (b->lock) */
    /* inputs, fixed once queued */
    unsigned char *file;
    size_t file_len;
    srv_model *sm; /* refs held until the job ends */
    char language[16];
    char *prompt;
    float temperature;
    int translate, sse, words;
    resp_fmt fmt;
    /* outputs (b->lock) */
    sotto_sb events; /* server-sent events not yet written */
    int started, finished, wake;
    int status;
    char *body; /* the response (or the error) once finished */
    size_t body_len;
    const char *ctype;
} batch_job;

enum { P_MODEL, P_LANGUAGE, P_PROMPT, P_TEMPERATURE, P_FORMAT, P_STREAM, P_GRAN, P_COUNT };
/* What the body may hold beyond the file: the other fields and the form's
 * framing. */
#define FORM_SLACK 65536
#define FORM_FIELD_MAX 8192 /* a text field (the prompt) */

static void queue_job(srv *s, srv_batch_req *r, char *const v[P_COUNT], int words);

static const char *const k_params[P_COUNT] = {"model",  "language", "prompt",
                                              "temperature", "response_format", "stream",
                                              "timestamp_granularities[]"};

struct srv_batch_req {
    srv *s;
    char boundary[SRV_FORM_BOUNDARY_MAX + 1];
    int translate;
    /* an error decided before the body was read: sent once it has been */
    unsigned int err_status;
    char *err_body;
    unsigned char *file;       /* the body as read; then the file part alone */
    size_t file_len, file_cap; /* bytes in it, its allocation */
    size_t limit;              /* the largest file part (--max-upload-mb) */
    int too_large;             /* the body went past limit + FORM_SLACK */
    batch_job *job;
    int headers_sent, closing;
};

/* ---- small helpers ---------------------------------------------------------------- */

static int respond_error(struct lws *wsi, unsigned int status, const char *type, const char *code,
                         const char *param, const char *msg) {
    char *j = srv_openai_error_json(type, code, param, msg);
    if (!j) return -1;
    int rc = srv_http_respond(wsi, status, "application/json", j, strlen(j));
    free(j);
    return rc;
}

static void job_unref_locked(srv *s, batch_job *j) {
    if (--j->refs > 0) return;
    for (batch_job **pp = &s->batch.jobs; *pp; pp = &(*pp)->next)
        if (*pp == j) {
            *pp = j->next;
            break;
        }
    if (j->sm) srv_model_release(s, j->sm);
    free(j->file);
    free(j->prompt);
    free(j->body);
    sotto_sb_free(&j->events);
    free(j);
}

static void req_free(srv *s, srv_batch_req *r) {
    if (!r) return;
    free(r->file);
    free(r->err_body);
    if (r->job) {
        pthread_mutex_lock(&s->batch.lock);
        r->job->wsi = NULL; /* cancels it */
        job_unref_locked(s, r->job);
        pthread_mutex_unlock(&s->batch.lock);
    }
    free(r);
}

static void req_fail(srv_batch_req *r, unsigned int status, const char *type, const char *code,
                     const char *param, const char *msg) {
    if (r->err_status) return; /* the first reason stands */
    r->err_status = status;
    r->err_body = srv_openai_error_json(type, code, param, msg);
}

/* ---- GET /v1/models ----------------------------------------------------------------- */

static cJSON *model_obj(const char *id) {
    cJSON *m = cJSON_CreateObject();
    if (!m) return NULL;
    cJSON_AddStringToObject(m, "id", id);
    cJSON_AddStringToObject(m, "object", "model");
    cJSON_AddNumberToObject(m, "created", 0);
    cJSON_AddStringToObject(m, "owned_by", "sotto");
    return m;
}

/* Every id srv_compat_model accepts without aliases: NAME (default weights)
 * and NAME:WEIGHTS for each offered variant, plus "whisper-1". */
static int models_response(srv *s, struct lws *wsi, const char *one) {
    cJSON *list = cJSON_CreateObject(), *data = cJSON_CreateArray();
    cJSON *found = NULL;
    if (!list || !data) {
        cJSON_Delete(list);
        cJSON_Delete(data);
        return respond_error(wsi, 500, "server_error", NULL, NULL, "out of memory");
    }
    cJSON_AddStringToObject(list, "object", "list");
    cJSON_AddItemToObject(list, "data", data);
    char id[96];
    cJSON_AddItemToArray(data, model_obj("whisper-1"));
    for (int i = 0; i < s->n_models; i++) {
        const srv_model *sm = &s->models[i];
        if (sm->weights == s->opt.default_weights) cJSON_AddItemToArray(data, model_obj(sm->name));
        snprintf(id, sizeof id, "%s:%s", sm->name, sotto_wfmt_name(sm->weights));
        cJSON_AddItemToArray(data, model_obj(id));
    }
    if (one) {
        const cJSON *m;
        cJSON_ArrayForEach(m, data) {
            const cJSON *v = cJSON_GetObjectItemCaseSensitive(m, "id");
            if (cJSON_IsString(v) && !strcmp(v->valuestring, one)) found = cJSON_Duplicate(m, 1);
        }
        cJSON_Delete(list);
        if (!found) {
            char why[160];
            snprintf(why, sizeof why, "The model '%.64s' does not exist", one);
            return respond_error(wsi, 404, "invalid_request_error", "model_not_found", "model", why);
        }
        list = found;
    }
    char *text = cJSON_PrintUnformatted(list);
    cJSON_Delete(list);
    if (!text) return respond_error(wsi, 500, "server_error", NULL, NULL, "out of memory");
    int rc = srv_http_respond(wsi, 200, "application/json", text, strlen(text));
    free(text);
    return rc;
}

/* ---- the request -------------------------------------------------------------------- */

int srv_batch_http(srv *s, struct lws *wsi, srv_batch_req **req, const char *uri) {
    int post = lws_hdr_total_length(wsi, WSI_TOKEN_POST_URI) > 0;
    if (!post && !strcmp(uri, "/v1/models")) {
        if (!srv_compat_authorized(s, wsi))
            return respond_error(wsi, 401, "invalid_request_error", "invalid_api_key", NULL,
                                 "Incorrect or missing API key (Authorization: Bearer KEY)");
        return models_response(s, wsi, NULL);
    }
    if (!post && !strncmp(uri, "/v1/models/", 11)) {
        if (!srv_compat_authorized(s, wsi))
            return respond_error(wsi, 401, "invalid_request_error", "invalid_api_key", NULL,
                                 "Incorrect or missing API key (Authorization: Bearer KEY)");
        return models_response(s, wsi, uri + 11);
    }
    int tr = !strcmp(uri, "/v1/audio/transcriptions"), tl = !strcmp(uri, "/v1/audio/translations");
    if (!tr && !tl) return 1;
    if (!post)
        return respond_error(wsi, 405, "invalid_request_error", "method_not_allowed", NULL,
                             "use POST with a multipart/form-data body");
    req_free(s, *req);
    srv_batch_req *r = *req = calloc(1, sizeof *r);
    if (!r) return -1;
    r->s = s;
    r->translate = tl;
    r->limit = (size_t)(s->opt.max_upload_mb * 1e6);
    char cl[32] = "", ct[256] = "";
    lws_hdr_copy(wsi, cl, sizeof cl, WSI_TOKEN_HTTP_CONTENT_LENGTH);
    lws_hdr_copy(wsi, ct, sizeof ct, WSI_TOKEN_HTTP_CONTENT_TYPE);
    double content_len = cl[0] ? strtod(cl, NULL) : 0;
    char why[200];
    if (!srv_compat_authorized(s, wsi)) {
        req_fail(r, 401, "invalid_request_error", "invalid_api_key", NULL,
                 "Incorrect or missing API key (Authorization: Bearer KEY)");
    } else if (atomic_load(&s->draining)) {
        req_fail(r, 503, "server_error", "shutting_down", NULL, "the server is shutting down");
    } else if (srv_multipart_boundary(ct, r->boundary, why, sizeof why)) {
        req_fail(r, 400, "invalid_request_error", "invalid_content_type", NULL, why);
    } else if (content_len > (double)r->limit + FORM_SLACK) {
        snprintf(why, sizeof why, "the upload is %.1f MB; this server takes files up to %.1f MB",
                 content_len / 1e6, s->opt.max_upload_mb);
        req_fail(r, 413, "invalid_request_error", "file_too_large", "file", why);
    }
    /* far too large: answer now and close rather than read it all */
    if (r->err_status && content_len > 4.0 * (double)r->limit + 1e6) {
        unsigned int st = r->err_status;
        char *body = r->err_body;
        r->err_body = NULL;
        *req = NULL;
        req_free(s, r);
        srv_http_respond(wsi, st, "application/json", body ? body : "{}", body ? strlen(body) : 2);
        free(body);
        return -1;
    }
    return 0; /* the body follows */
}

/* The body is kept whole (bounded), then parsed at its end. */
int srv_batch_body(srv *s, struct lws *wsi, srv_batch_req *r, const void *in, size_t len) {
    (void)s, (void)wsi;
    if (!r || r->err_status || r->too_large || len == 0) return 0; /* read and dropped */
    size_t max = r->limit + FORM_SLACK;
    if (len > max - r->file_len) {
        r->too_large = 1;
        free(r->file);
        r->file = NULL;
        r->file_len = r->file_cap = 0;
        return 0;
    }
    if (r->file_len + len > r->file_cap) {
        size_t cap = r->file_cap ? r->file_cap : 65536;
        while (cap < r->file_len + len) cap *= 2;
        if (cap > max) cap = max;
        unsigned char *nb = realloc(r->file, cap);
        if (!nb) {
            req_fail(r, 500, "server_error", NULL, NULL, "out of memory");
            return 0;
        }
        r->file = nb;
        r->file_cap = cap;
    }
    memcpy(r->file + r->file_len, in, len);
    r->file_len += len;
    return 0;
}

static int parse_format(const char *f, resp_fmt *out) {
    static const struct {
        const char *name;
        resp_fmt f;
    } k[] = {{"json", RF_JSON}, {"text", RF_TEXT}, {"srt", RF_SRT}, {"vtt", RF_VTT}, {"verbose_json", RF_VERBOSE}};
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++)
        if (!strcmp(f, k[i].name)) return *out = k[i].f, 0;
    return -1;
}

/* The form's text fields (NUL-terminated copies, NULL when absent or empty)
 * and the file part moved to the front of r->file; 0, or -1 after req_fail. */
static int read_form(srv *s, srv_batch_req *r, char *v[P_COUNT], int *words) {
    char why[300], msg[400];
    if (r->too_large) {
        snprintf(why, sizeof why, "the file is larger than this server's limit of %.1f MB",
                 s->opt.max_upload_mb);
        return req_fail(r, 413, "invalid_request_error", "file_too_large", "file", why), -1;
    }
    srv_form *f = malloc(sizeof *f);
    if (!f) return req_fail(r, 500, "server_error", NULL, NULL, "out of memory"), -1;
    if (srv_multipart_parse(r->file, r->file_len, r->boundary, f, why, sizeof why)) {
        free(f);
        snprintf(msg, sizeof msg, "the multipart form could not be parsed: %s", why);
        return req_fail(r, 400, "invalid_request_error", "invalid_form", NULL, msg), -1;
    }
    const srv_form_part *file = srv_form_get(f, "file", 0);
    int rc = 0;
    if (!file || file->len == 0) {
        rc = -1;
        req_fail(r, 400, "invalid_request_error", NULL, "file",
                 "you must provide a non-empty 'file' (an audio file) in the form");
    } else if (file->len > r->limit) {
        rc = -1;
        snprintf(why, sizeof why, "the file is larger than this server's limit of %.1f MB",
                 s->opt.max_upload_mb);
        req_fail(r, 413, "invalid_request_error", "file_too_large", "file", why);
    }
    for (int i = 0; rc == 0 && i < P_COUNT; i++) {
        const srv_form_part *pt = srv_form_get(f, k_params[i], 0);
        if (!pt || pt->len == 0) continue;
        if (pt->len > FORM_FIELD_MAX) {
            rc = -1;
            snprintf(msg, sizeof msg, "the form field '%s' is longer than %d bytes", k_params[i], FORM_FIELD_MAX);
            req_fail(r, 400, "invalid_request_error", "invalid_value", k_params[i], msg);
        } else if (!(v[i] = strndup((const char *)pt->data, pt->len))) {
            rc = -1;
            req_fail(r, 500, "server_error", NULL, NULL, "out of memory");
        }
    }
    *words = 0; /* timestamp_granularities[] may be given once per value */
    for (int k = 0; rc == 0 && k < f->n; k++) {
        const srv_form_part *pt = srv_form_get(f, k_params[P_GRAN], k);
        if (!pt) break;
        if (pt->len >= 4 && memmem(pt->data, pt->len, "word", 4)) *words = 1;
    }
    if (rc == 0) { /* the file to the front: the rest of the body is not needed */
        memmove(r->file, file->data, file->len);
        r->file_len = file->len;
    }
    free(f);
    return rc;
}

/* Validates the form and queues the job; errors are kept for the response. */
static void make_job(srv *s, srv_batch_req *r) {
    char *v[P_COUNT] = {NULL};
    int words = 0;
    if (read_form(s, r, v, &words) == 0) queue_job(s, r, v, words);
    for (int i = 0; i < P_COUNT; i++) free(v[i]);
}

static void queue_job(srv *s, srv_batch_req *r, char *const v[P_COUNT], int words) {
    char why[256], model[64];
    sotto_wfmt w;
    resp_fmt fmt = RF_JSON;
    double temp = 0;
    if (!v[P_MODEL])
        return req_fail(r, 400, "invalid_request_error", NULL, "model",
                        "you must provide a model parameter (e.g. whisper-1)");
    if (srv_compat_model(s, v[P_MODEL], 0, model, sizeof model, &w, why, sizeof why))
        return req_fail(r, 404, "invalid_request_error", "model_not_found", "model", why);
    if (v[P_FORMAT] && parse_format(v[P_FORMAT], &fmt))
        return req_fail(r, 400, "invalid_request_error", "unsupported_value", "response_format",
                        "response_format must be one of json, text, srt, verbose_json, vtt");
    if (v[P_TEMPERATURE]) {
        char *end = NULL;
        temp = strtod(v[P_TEMPERATURE], &end);
        if (end == v[P_TEMPERATURE] || *end || !(temp >= 0 && temp <= 1))
            return req_fail(r, 400, "invalid_request_error", "invalid_value", "temperature",
                            "temperature must be a number from 0 to 1");
    }
    if (v[P_LANGUAGE] && (strlen(v[P_LANGUAGE]) >= 16 || !*v[P_LANGUAGE]))
        return req_fail(r, 400, "invalid_request_error", "invalid_value", "language",
                        "language must be an ISO-639-1 code such as 'en'");
    int sse = v[P_STREAM] && !strcmp(v[P_STREAM], "true");
    if (v[P_STREAM] && !sse && strcmp(v[P_STREAM], "false"))
        return req_fail(r, 400, "invalid_request_error", "invalid_value", "stream", "stream must be true or false");
    if (words && fmt != RF_VERBOSE)
        return req_fail(r, 400, "invalid_request_error", "invalid_value", "timestamp_granularities",
                        "timestamp_granularities needs response_format verbose_json");
    srv_model *sm = srv_model_find(s, model, w);
    if (!sm) return req_fail(r, 404, "invalid_request_error", "model_not_found", "model", "no such model");
    batch_job *j = calloc(1, sizeof *j);
    if (!j || (v[P_PROMPT] && !(j->prompt = strdup(v[P_PROMPT])))) {
        free(j);
        return req_fail(r, 500, "server_error", NULL, NULL, "out of memory");
    }
    j->file = r->file;
    j->file_len = r->file_len;
    r->file = NULL;
    snprintf(j->language, sizeof j->language, "%s", v[P_LANGUAGE] ? v[P_LANGUAGE] : "");
    j->temperature = (float)temp;
    j->translate = r->translate;
    j->sse = sse;
    j->words = words;
    j->fmt = fmt;
    j->refs = 2;
    j->srv = s;
    pthread_mutex_lock(&s->batch.lock);
    if (s->batch.n_queued >= s->opt.batch_queue || !s->batch.started) {
        pthread_mutex_unlock(&s->batch.lock);
        free(j->file);
        free(j->prompt);
        free(j);
        return req_fail(r, 429, "rate_limit_error", "queue_full", NULL,
                        "the transcription queue is full; retry later");
    }
    pthread_mutex_lock(&s->lock);
    sm->refs++; /* keeps the variant loaded until the job ends */
    pthread_mutex_unlock(&s->lock);
    j->sm = sm;
    j->next = s->batch.jobs;
    s->batch.jobs = j;
    s->batch.n_queued++;
    r->job = j;
    pthread_cond_signal(&s->batch.cond);
    pthread_mutex_unlock(&s->batch.lock);
}

int srv_batch_body_done(srv *s, struct lws *wsi, srv_batch_req **req) {
    srv_batch_req *r = *req;
    if (!r) return -1;
    if (!r->err_status) make_job(s, r);
    if (r->err_status) {
        unsigned int st = r->err_status;
        char *body = r->err_body;
        r->err_body = NULL;
        *req = NULL; /* before the response: see srv_batch_writeable */
        req_free(s, r);
        int rc = body ? srv_http_respond(wsi, st, "application/json", body, strlen(body)) : -1;
        free(body);
        return rc;
    }
    pthread_mutex_lock(&s->batch.lock);
    r->job->wsi = wsi;
    pthread_mutex_unlock(&s->batch.lock);
    return 0; /* the response comes from srv_batch_writeable */
}

/* ---- the transcriber thread ----------------------------------------------------------- */

static void job_event(batch_job *j, cJSON *ev) { /* b->lock held; takes ev */
    char *t = ev ? cJSON_PrintUnformatted(ev) : NULL;
    cJSON_Delete(ev);
    if (!t) return;
    sotto_sb_printf(&j->events, "data: %s\n\n", t);
    free(t);
    j->wake = 1;
}

static int on_segment(void *user, const sotto_segment *seg) {
    batch_job *j = user;
    srv_batch *b = &j->srv->batch;
    pthread_mutex_lock(&b->lock);
    int gone = j->wsi == NULL;
    if (!gone && j->sse) {
        cJSON *e = cJSON_CreateObject();
        if (e) {
            cJSON_AddStringToObject(e, "type", "transcript.text.delta");
            cJSON_AddStringToObject(e, "delta", seg->text);
        }
        job_event(j, e);
    }
    pthread_mutex_unlock(&b->lock);
    if (!gone && j->sse) srv_wake(j->srv);
    return gone;
}

static char *joined_text(const sotto_transcript *t) {
    sotto_sb b = {0};
    for (int i = 0; i < t->n_segments; i++) {
        const char *x = t->segments[i].text;
        if (b.len == 0)
            while (*x == ' ') x++;
        sotto_sb_put(&b, x, strlen(x));
    }
    return sotto_sb_take(&b, NULL);
}

static void add_usage(cJSON *o, double duration) {
    cJSON *u = cJSON_AddObjectToObject(o, "usage");
    cJSON_AddStringToObject(u, "type", "duration");
    cJSON_AddNumberToObject(u, "seconds", ceil(duration));
}

/* The response body in the job's format. */
static int render(batch_job *j, const sotto_transcript *t, const char *lang_name) {
    char *text = joined_text(t);
    if (!text) return -1;
    if (j->fmt == RF_TEXT) {
        sotto_sb b = {0};
        sotto_sb_printf(&b, "%s\n", text);
        free(text);
        j->ctype = "text/plain; charset=utf-8";
        return (j->body = sotto_sb_take(&b, &j->body_len)) ? 0 : -1;
    }
    if (j->fmt == RF_SRT || j->fmt == RF_VTT) {
        free(text);
        sotto_cue *cues = malloc(sizeof(sotto_cue) * (size_t)(t->n_segments + 1));
        if (!cues) return -1;
        for (int i = 0; i < t->n_segments; i++)
            cues[i] = (sotto_cue){t->segments[i].start, t->segments[i].end, t->segments[i].text};
        j->body = sotto_subtitles(cues, t->n_segments, j->fmt == RF_VTT, &j->body_len);
        free(cues);
        j->ctype = j->fmt == RF_VTT ? "text/vtt; charset=utf-8" : "application/x-subrip; charset=utf-8";
        return j->body ? 0 : -1;
    }
    cJSON *o = cJSON_CreateObject();
    if (!o) return free(text), -1;
    if (j->fmt == RF_VERBOSE) {
        cJSON_AddStringToObject(o, "task", j->translate ? "translate" : "transcribe");
        cJSON_AddStringToObject(o, "language", lang_name);
        cJSON_AddNumberToObject(o, "duration", t->duration);
    }
    cJSON_AddStringToObject(o, "text", text);
    free(text);
    if (j->fmt == RF_VERBOSE) {
        cJSON *segs = cJSON_AddArrayToObject(o, "segments"), *words = NULL;
        if (j->words) words = cJSON_AddArrayToObject(o, "words");
        for (int i = 0; i < t->n_segments; i++) {
            const sotto_segment *sg = &t->segments[i];
            cJSON *x = cJSON_CreateObject();
            cJSON_AddNumberToObject(x, "id", i);
            cJSON_AddNumberToObject(x, "seek", floor(sg->start * 100));
            cJSON_AddNumberToObject(x, "start", sg->start);
            cJSON_AddNumberToObject(x, "end", sg->end);
            cJSON_AddStringToObject(x, "text", sg->text);
            cJSON *tk = cJSON_AddArrayToObject(x, "tokens");
            for (int k = 0; k < sg->n_tokens; k++) cJSON_AddItemToArray(tk, cJSON_CreateNumber(sg->tokens[k]));
            cJSON_AddNumberToObject(x, "temperature", sg->temperature);
            cJSON_AddNumberToObject(x, "avg_logprob", sg->avg_logprob);
            cJSON_AddNumberToObject(x, "compression_ratio", sg->compression_ratio);
            cJSON_AddNumberToObject(x, "no_speech_prob", sg->no_speech_prob);
            cJSON_AddItemToArray(segs, x);
            if (words) { /* interpolated within the segment (docs/COMPAT.md) */
                sotto_word_span ws[256];
                int n = sotto_cue_words(sg->text, sg->start, sg->end, ws, 256);
                for (int k = 0; k < n; k++) {
                    cJSON *wj = cJSON_CreateObject();
                    char buf[256];
                    snprintf(buf, sizeof buf, "%.*s", (int)ws[k].len, sg->text + ws[k].off);
                    cJSON_AddStringToObject(wj, "word", buf);
                    cJSON_AddNumberToObject(wj, "start", ws[k].start);
                    cJSON_AddNumberToObject(wj, "end", ws[k].end);
                    cJSON_AddItemToArray(words, wj);
                }
            }
        }
    }
    add_usage(o, t->duration);
    j->body = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    j->body_len = j->body ? strlen(j->body) : 0;
    j->ctype = "application/json";
    return j->body ? 0 : -1;
}

static void finish_error(batch_job *j, int status, const char *type, const char *code, const char *msg) {
    srv_batch *b = &j->srv->batch;
    pthread_mutex_lock(&b->lock);
    j->status = status;
    free(j->body);
    j->body = srv_openai_error_json(type, code, NULL, msg);
    j->body_len = j->body ? strlen(j->body) : 0;
    j->ctype = "application/json";
    if (j->sse && j->events.len) { /* the stream has begun: the error is its last event */
        cJSON *e = cJSON_Parse(j->body ? j->body : "{}");
        if (e) cJSON_AddStringToObject(e, "type", "error");
        job_event(j, e);
    }
    j->finished = j->wake = 1;
    pthread_mutex_unlock(&b->lock);
}

static void run_job(srv *s, batch_job *j) {
    sotto_err err = {0};
    float *audio = NULL;
    size_t n = 0;
    double t0 = srv_now();
    int drc = srv_decode_upload_max(j->file, j->file_len, s->opt.max_upload_s, &audio, &n, &err);
    if (drc == SOTTO_E_RANGE) {
        char why[SOTTO_ERR_MSG_MAX + 128];
        snprintf(why, sizeof why, "the audio is too long: this server takes at most %.0f s per file: %s",
                 s->opt.max_upload_s, err.msg);
        finish_error(j, 413, "invalid_request_error", "audio_too_long", why);
        return;
    }
    if (drc) {
        char why[SOTTO_ERR_MSG_MAX + 64];
        snprintf(why, sizeof why, "the file could not be decoded: %s", err.msg);
        finish_error(j, 400, "invalid_request_error", "invalid_file_format", why);
        return;
    }
    free(j->file);
    j->file = NULL;
    j->file_len = 0;
    if (srv_model_acquire(s, j->sm, &err)) {
        free(audio);
        finish_error(j, 503, "server_error", "model_unavailable", err.msg);
        return;
    }
    const sotto_model *m = j->sm->model; /* held by the job's ref */
    int multi = sotto_model_is_multilingual(m);
    const char *lang = j->language[0] && strcmp(j->language, "auto") ? j->language : NULL;
    char why[200];
    if (j->translate && !multi) {
        free(audio);
        snprintf(why, sizeof why, "the model %s is English-only and cannot translate", j->sm->name);
        finish_error(j, 400, "invalid_request_error", "unsupported_value", why);
        return;
    }
    if (lang && sotto_language_index(m, lang) < 0) {
        free(audio);
        snprintf(why, sizeof why, "the model %s does not know the language '%s'", j->sm->name, lang);
        finish_error(j, 400, "invalid_request_error", "unsupported_language", why);
        return;
    }
    sotto_transcribe_opts o = sotto_transcribe_default_opts();
    o.language = lang;
    o.vad = s->silero; /* windows without speech are not decoded */
    o.task = j->translate ? SOTTO_TASK_TRANSLATE : SOTTO_TASK_TRANSCRIBE;
    o.initial_prompt = j->prompt;
    if (j->temperature > 0) { /* a given temperature starts the fallback ladder */
        o.n_temperatures = 0;
        for (float t = j->temperature; t <= 1.0001f && o.n_temperatures < SOTTO_MAX_TEMPERATURES; t += 0.2f)
            o.temperatures[o.n_temperatures++] = t > 1 ? 1 : t;
    }
    o.on_segment = on_segment;
    o.user = j;
    sotto_transcript t;
    memset(&t, 0, sizeof t);
    int rc = sotto_transcribe(m, audio, n, &o, &t, &err);
    free(audio);
    pthread_mutex_lock(&s->batch.lock);
    int gone = j->wsi == NULL;
    pthread_mutex_unlock(&s->batch.lock);
    if (gone) {
        sotto_transcript_free(&t);
        finish_error(j, 499, "server_error", "cancelled", "the client left");
        return;
    }
    if (rc) {
        sotto_transcript_free(&t);
        finish_error(j, 500, "server_error", "transcription_failed", err.msg);
        return;
    }
    /* the body is only read once `finished` is set (under the lock): render it outside */
    if (render(j, &t, sotto_language_name(t.language))) {
        sotto_transcript_free(&t);
        finish_error(j, 500, "server_error", NULL, "out of memory");
        return;
    }
    cJSON *done = NULL;
    if (j->sse) {
        char *text = joined_text(&t);
        if ((done = cJSON_CreateObject())) {
            cJSON_AddStringToObject(done, "type", "transcript.text.done");
            cJSON_AddStringToObject(done, "text", text ? text : "");
            add_usage(done, t.duration);
        }
        free(text);
    }
    pthread_mutex_lock(&s->batch.lock);
    j->status = 200;
    if (done) job_event(j, done);
    j->finished = j->wake = 1;
    pthread_mutex_unlock(&s->batch.lock);
    sotto_log(SOTTO_LOG_INFO, 0, "batch: %.1f s of audio (%s) in %.2f s", t.duration,
              j->translate ? "translate" : "transcribe", srv_now() - t0);
    sotto_transcript_free(&t);
}

static void *batch_main(void *arg) {
    srv *s = arg;
    omp_set_num_threads(s->opt.batch_threads); /* this thread's own OpenMP setting */
    pthread_mutex_lock(&s->batch.lock);
    while (!s->batch.stop) {
        batch_job *next = NULL;
        for (batch_job *j = s->batch.jobs; j; j = j->next)
            if (!j->started) next = j; /* the oldest (the list is newest first) */
        if (!next) {
            pthread_cond_wait(&s->batch.cond, &s->batch.lock);
            continue;
        }
        next->started = 1;
        pthread_mutex_unlock(&s->batch.lock);
        run_job(s, next);
        srv_wake(s);
        pthread_mutex_lock(&s->batch.lock);
        s->batch.n_queued--;
        job_unref_locked(s, next); /* the queue's ref */
    }
    pthread_mutex_unlock(&s->batch.lock);
    return NULL;
}

void srv_batch_init(srv *s) {
    memset(&s->batch, 0, sizeof s->batch);
    pthread_mutex_init(&s->batch.lock, NULL);
    pthread_cond_init(&s->batch.cond, NULL);
}

int srv_batch_start(srv *s) {
    if (pthread_create(&s->batch.thread, NULL, batch_main, s)) return -1;
    s->batch.started = 1;
    return 0;
}

int srv_batch_busy(srv *s) {
    pthread_mutex_lock(&s->batch.lock);
    int n = s->batch.n_queued;
    pthread_mutex_unlock(&s->batch.lock);
    return n;
}

void srv_batch_stop(srv *s) {
    if (!s->batch.started) return;
    pthread_mutex_lock(&s->batch.lock);
    s->batch.stop = 1;
    for (batch_job *j = s->batch.jobs; j; j = j->next) j->wsi = NULL; /* cancels the running one */
    pthread_cond_broadcast(&s->batch.cond);
    pthread_mutex_unlock(&s->batch.lock);
    pthread_join(s->batch.thread, NULL);
    s->batch.started = 0;
    pthread_mutex_lock(&s->batch.lock);
    for (int again = 1; again;) { /* jobs never started: drop the queue's ref */
        again = 0;
        for (batch_job *j = s->batch.jobs; j; j = j->next)
            if (!j->started) {
                j->started = 1;
                s->batch.n_queued--;
                job_unref_locked(s, j);
                again = 1;
                break;
            }
    }
    pthread_mutex_unlock(&s->batch.lock);
}

/* ---- writing the response ---------------------------------------------------------------- */

void srv_batch_wakeup(srv *s) {
    pthread_mutex_lock(&s->batch.lock);
    for (batch_job *j = s->batch.jobs; j; j = j->next)
        if (j->wake && j->wsi) {
            j->wake = 0;
            lws_callback_on_writable(j->wsi);
        }
    pthread_mutex_unlock(&s->batch.lock);
}

int srv_batch_writeable(srv *s, struct lws *wsi, srv_batch_req **req) {
    srv_batch_req *r = *req;
    if (!r || !r->job) return 0;
    if (r->closing) return -1; /* the event stream is written out: it ends with the connection */
    batch_job *j = r->job;
    pthread_mutex_lock(&s->batch.lock);
    size_t len = 0;
    char *events = NULL;
    if (j->sse && (r->headers_sent || j->events.len)) events = sotto_sb_take(&j->events, &len);
    int finished = j->finished;
    pthread_mutex_unlock(&s->batch.lock);
    if (events) { /* server-sent events: no length, the connection closes at the end */
        if (!r->headers_sent) {
            unsigned char hdr[LWS_PRE + 512], *start = hdr + LWS_PRE, *p = start, *end = hdr + sizeof hdr;
            if (lws_add_http_common_headers(wsi, 200, "text/event-stream", LWS_ILLEGAL_HTTP_CONTENT_LEN,
                                            &p, end) ||
                lws_add_http_header_by_token(wsi, WSI_TOKEN_HTTP_CACHE_CONTROL,
                                             (const unsigned char *)"no-cache", 8, &p, end) ||
                lws_add_http_header_by_token(wsi, WSI_TOKEN_CONNECTION, (const unsigned char *)"close",
                                             5, &p, end) ||
                lws_finalize_write_http_header(wsi, start, &p, end)) {
                free(events);
                return -1;
            }
            r->headers_sent = 1;
        }
        int n = (int)len;
        if (len) {
            unsigned char *out = malloc(LWS_PRE + len);
            if (out) {
                memcpy(out + LWS_PRE, events, len);
                n = lws_write(wsi, out + LWS_PRE, len, LWS_WRITE_HTTP);
                free(out);
            } else {
                n = -1;
            }
        }
        free(events);
        if (n < (int)len) return -1;
        if (finished) {
            pthread_mutex_lock(&s->batch.lock);
            int more = j->events.len > 0;
            pthread_mutex_unlock(&s->batch.lock);
            if (!more) r->closing = 1;
            lws_callback_on_writable(wsi);
        }
        return 0;
    }
    if (!finished) return 0;
    /* the request goes before the response: completing the transaction may
       free the connection's user data, where *req lives */
    pthread_mutex_lock(&s->batch.lock);
    char *body = j->body;
    size_t blen = j->body_len;
    unsigned int status = (unsigned int)j->status;
    const char *ctype = j->ctype;
    j->body = NULL;
    pthread_mutex_unlock(&s->batch.lock);
    *req = NULL;
    req_free(s, r);
    int rc = srv_http_respond(wsi, status, ctype, body ? body : "", blen);
    free(body);
    return rc;
}

void srv_batch_closed(srv *s, srv_batch_req **req) {
    req_free(s, *req);
    *req = NULL;
}
