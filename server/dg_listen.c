/* dg_listen.c - Deepgram-style live transcription on /v1/listen
 * (docs/COMPAT.md).
 *
 * Query: encoding (linear16, mulaw, alaw, opus = raw packets one per
 * message or an Ogg stream, ogg-opus), sample_rate, channels, language,
 * model, interim_results, endpointing (ms or false), utterance_end_ms,
 * vad_events. Binary messages carry audio; text messages KeepAlive,
 * Finalize, CloseStream.
 * Server messages: Results (interim: the utterance's committed + tentative
 * text; final: its text, is_final and speech_final, words with times
 * interpolated over the utterance), SpeechStarted, UtteranceEnd, Metadata
 * (after CloseStream, before the close), Error.
 */
#define _POSIX_C_SOURCE 200809L
#include "compat.h"
#include "dg_listen.h"

#include "subtitle.h"

#include <ctype.h>
#include <errno.h>
#include <libwebsockets.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { E_LINEAR16 = SRV_DG_LINEAR16, E_MULAW = SRV_DG_MULAW, E_ALAW = SRV_DG_ALAW, E_OPUS = SRV_DG_OPUS,
       E_OGG_OPUS = SRV_DG_OGG_OPUS };

typedef struct dg {
    srv_session *ss;
    char request_id[40], created[32];
    srv_dg_query q;     /* the query (dg_listen.h) */
    int bad;            /* the query was refused: everything else is ignored */
    /* Ogg Opus */
    int ogg;
    srv_ogg og;
    srv_link *link;     /* while pushing Ogg: the connection the packets go to */
    /* progress */
    double audio_s;     /* accepted audio, for interim durations */
    double utt_start;
    int ended[64];      /* recent utterances that ended by the VAD (their finals may lag) */
    int finalize_pending;
    char last_interim[2048];
} dg;

static void send_obj(srv_link *l, cJSON *o) {
    if (!o) return;
    srv_link_send(l, cJSON_PrintUnformatted(o));
    cJSON_Delete(o);
}

static void send_error(srv_link *l, const char *variant, const char *msg, int fatal) {
    cJSON *o = cJSON_CreateObject();
    if (!o) return;
    cJSON_AddStringToObject(o, "type", "Error");
    cJSON_AddStringToObject(o, "variant", variant);
    cJSON_AddStringToObject(o, "description", msg);
    cJSON_AddStringToObject(o, "message", msg);
    send_obj(l, o);
    if (fatal) srv_link_close_after(l, LWS_CLOSE_STATUS_POLICY_VIOLATION);
}

/* The value of query parameter name ("encoding=") into buf: the first piece
 * of query that starts with name (as lws_get_urlarg_by_name). */
static int arg(const char *query, const char *name, char *buf, size_t sz) {
    size_t nl = strlen(name);
    for (const char *p = query; p && *p;) {
        const char *end = strchr(p, '&');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len >= nl && !strncmp(p, name, nl)) {
            size_t vl = len - nl < sz - 1 ? len - nl : sz - 1;
            memcpy(buf, p + nl, vl);
            buf[vl] = '\0';
            return 1;
        }
        p = end ? end + 1 : NULL;
    }
    return 0;
}

static int is_true(const char *v) { return !strcmp(v, "true") || !strcmp(v, "1"); }

/* A decimal integer in lo..hi (leading digits count, as atoi; no overflow). */
static int int_arg(const char *v, long lo, long hi, int *out) {
    errno = 0;
    long x = strtol(v, NULL, 10);
    if (errno || x < lo || x > hi) return -1;
    *out = (int)x;
    return 0;
}

const char *srv_dg_parse_query(srv_dg_query *d, const char *query) {
    char v[96];
    memset(d, 0, sizeof *d);
    if (arg(query, "encoding=", v, sizeof v)) {
        if (!strcmp(v, "linear16")) d->enc = E_LINEAR16;
        else if (!strcmp(v, "mulaw")) d->enc = E_MULAW;
        else if (!strcmp(v, "alaw")) d->enc = E_ALAW;
        else if (!strcmp(v, "opus")) d->enc = E_OPUS;
        else if (!strcmp(v, "ogg-opus")) d->enc = E_OGG_OPUS;
        else return "encoding must be linear16, mulaw, alaw, opus or ogg-opus";
    }
    d->rate = d->enc == E_OPUS || d->enc == E_OGG_OPUS ? 48000 : d->enc == E_LINEAR16 ? 16000 : 8000;
    if (arg(query, "sample_rate=", v, sizeof v) && int_arg(v, 8000, 48000, &d->rate))
        return "sample_rate must be 8000..48000";
    d->channels = 1;
    if (arg(query, "channels=", v, sizeof v) && int_arg(v, 1, 2, &d->channels))
        return "channels must be 1 or 2 (they are mixed to one)";
    if (arg(query, "language=", v, sizeof v)) {
        if (strlen(v) >= sizeof d->language) return "language must be a code such as en";
        /* Deepgram's regional codes ("en-US") and "multi" */
        char *dash = strchr(v, '-');
        if (dash) *dash = '\0';
        snprintf(d->language, sizeof d->language, "%s", strcmp(v, "multi") ? v : "auto");
    }
    if (arg(query, "model=", v, sizeof v)) snprintf(d->model, sizeof d->model, "%s", v);
    if (arg(query, "interim_results=", v, sizeof v)) d->interim = is_true(v);
    if (arg(query, "vad_events=", v, sizeof v)) d->vad_events = is_true(v);
    if (arg(query, "endpointing=", v, sizeof v)) {
        if (!strcmp(v, "false")) {
            d->endpointing_ms = 10000;
        } else if (strcmp(v, "true")) {
            int ms;
            if (!isdigit((unsigned char)v[0]) || int_arg(v, 0, 10000, &ms))
                return "endpointing must be milliseconds (0..10000) or false";
            d->endpointing_ms = ms < 100 ? 100 : ms; /* sotto's VAD needs 100 ms of silence at least */
        }
    }
    if (arg(query, "utterance_end_ms=", v, sizeof v) && int_arg(v, 1000, 5000, &d->utterance_end_ms))
        return "utterance_end_ms must be 1000..5000";
    return NULL;
}

/* The query as "a=1&b=2" from libwebsockets' URL-decoded pieces ("" without
 * a connection: the fuzz harness). */
static void query_of(struct lws *wsi, char *q, size_t sz) {
    size_t n = 0;
    q[0] = '\0';
    if (!wsi) return;
    char frag[256];
    for (int i = 0;; i++) {
        int len = lws_hdr_copy_fragment(wsi, frag, (int)sizeof frag, WSI_TOKEN_HTTP_URI_ARGS, i);
        if (len < 0 || n + (size_t)len + 2 > sz) break;
        if (n) q[n++] = '&';
        memcpy(q + n, frag, (size_t)len);
        n += (size_t)len;
        q[n] = '\0';
    }
}

void *srv_dg_open_query(srv_link *l, const char *query) {
    dg *d = calloc(1, sizeof *d);
    if (!d) return NULL;
    d->ss = srv_link_session(l);
    unsigned char rnd[16];
    FILE *f = fopen("/dev/urandom", "rb");
    size_t got = f ? fread(rnd, 1, sizeof rnd, f) : 0;
    if (f) fclose(f);
    for (size_t i = got; i < sizeof rnd; i++) rnd[i] = (unsigned char)(d->ss->id * 131 + i * 7);
    rnd[6] = (unsigned char)((rnd[6] & 0x0f) | 0x40), rnd[8] = (unsigned char)((rnd[8] & 0x3f) | 0x80);
    snprintf(d->request_id, sizeof d->request_id,
             "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", rnd[0], rnd[1], rnd[2],
             rnd[3], rnd[4], rnd[5], rnd[6], rnd[7], rnd[8], rnd[9], rnd[10], rnd[11], rnd[12], rnd[13],
             rnd[14], rnd[15]);
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(d->created, sizeof d->created, "%Y-%m-%dT%H:%M:%S.000Z", &tm);
    const char *why = srv_dg_parse_query(&d->q, query);
    char model[64], mwhy[200];
    sotto_wfmt w;
    if (!why && srv_compat_model(srv_link_srv(l), d->q.model, 1, model, sizeof model, &w, mwhy, sizeof mwhy)) why = mwhy;
    if (why) {
        d->bad = 1;
        send_error(l, "INVALID_QUERY_PARAMETER", why, 1);
    }
    d->ogg = d->q.enc == E_OGG_OPUS;
    return d;
}

static void *dg_open(srv_link *l, struct lws *wsi) {
    char query[2048];
    query_of(wsi, query, sizeof query);
    return srv_dg_open_query(l, query);
}

static void dg_close(void *st) {
    dg *d = st;
    srv_ogg_free(&d->og);
    free(d);
}

static int start_session(srv_link *l, dg *d, int opus_channels) {
    char model[64], why[200];
    sotto_wfmt w;
    if (srv_compat_model(srv_link_srv(l), d->q.model, 1, model, sizeof model, &w, why, sizeof why)) return -1;
    cJSON *m = cJSON_CreateObject(), *vad = cJSON_CreateObject();
    if (!m || !vad) {
        cJSON_Delete(m), cJSON_Delete(vad);
        return -1;
    }
    int opus = d->q.enc == E_OPUS || d->q.enc == E_OGG_OPUS;
    cJSON_AddStringToObject(m, "type", "start");
    cJSON_AddStringToObject(m, "encoding", opus ? "opus" : "pcm_s16le");
    cJSON_AddNumberToObject(m, "sample_rate", opus ? 48000 : d->q.rate);
    cJSON_AddNumberToObject(m, "channels", opus && opus_channels ? opus_channels : d->q.channels);
    if (model[0]) cJSON_AddStringToObject(m, "model", model);
    cJSON_AddStringToObject(m, "weights", sotto_wfmt_name(w));
    if (d->q.language[0]) cJSON_AddStringToObject(m, "language", d->q.language);
    cJSON_AddBoolToObject(m, "partials", d->q.interim);
    if (d->q.endpointing_ms) cJSON_AddNumberToObject(vad, "silence_ms", d->q.endpointing_ms);
    cJSON_AddItemToObject(m, "vad", vad);
    int rc = srv_link_start(l, m);
    cJSON_Delete(m);
    return rc;
}

static void push_pcm(srv_link *l, dg *d, const unsigned char *data, size_t len) {
    if (d->q.enc == E_MULAW || d->q.enc == E_ALAW) {
        unsigned char *s16 = srv_g711_to_s16le(data, len, d->q.enc == E_ALAW);
        if (s16) srv_link_audio(l, s16, len * 2);
        free(s16);
        return;
    }
    srv_link_audio(l, data, len);
}

/* ---- the Ogg Opus demuxer (dg_listen.h) ---------------------------------------------- */

int srv_ogg_opus_push(srv_ogg *g, const void *data, size_t len, srv_ogg_packet_fn fn, void *user,
                      const char **why) {
    if (!g->sync_ready) ogg_sync_init(&g->oy), g->sync_ready = 1;
    if (len > (size_t)0x7fffffff) return *why = "an Ogg message too large", -1;
    char *buf = ogg_sync_buffer(&g->oy, (long)len);
    if (!buf) return *why = "out of memory", -1;
    if (len) memcpy(buf, data, len);
    ogg_sync_wrote(&g->oy, (long)len);
    ogg_page pg;
    int got;
    /* -1 (bytes skipped to find the next page) goes on looking: stopping there
     * would leave the rest of the message in the sync buffer, which grew by
     * a message's bytes for each skip (a message of many pages between bytes
     * that never sync) */
    while ((got = ogg_sync_pageout(&g->oy, &pg)) != 0) {
        if (got < 0) continue;
        if (!g->stream_ready) {
            if (ogg_stream_init(&g->os, ogg_page_serialno(&pg))) return *why = "out of memory", -1;
            g->stream_ready = 1;
        }
        if (ogg_page_serialno(&pg) != g->os.serialno) continue;
        /* libogg keeps a packet that continues across pages without a limit:
         * an unfinished packet plus this page must fit the largest Opus
         * packet plus the largest page (bounds the session's memory) */
        long pending = g->os.body_fill - g->os.body_returned;
        if (pending + pg.body_len > SRV_OGG_MAX_PENDING)
            return *why = "the Ogg stream holds a packet longer than the largest Opus packet (61200 bytes)", -1;
        if (ogg_stream_pagein(&g->os, &pg)) continue;
        ogg_packet pk;
        while (ogg_stream_packetout(&g->os, &pk) == 1) {
            int k = g->packets < 2 ? g->packets++ : 2;
            if (k == 0 && (pk.bytes < 19 || memcmp(pk.packet, "OpusHead", 8)))
                return *why = "the Ogg stream does not hold Opus (no OpusHead)", -1;
            if (pk.bytes < 0) continue;
            if (fn(user, k, pk.packet, (size_t)pk.bytes)) return 1;
        }
    }
    return 0;
}

void srv_ogg_free(srv_ogg *g) {
    if (g->stream_ready) ogg_stream_clear(&g->os);
    if (g->sync_ready) ogg_sync_clear(&g->oy);
    g->stream_ready = g->sync_ready = 0;
}

/* A packet of the Deepgram client's Ogg stream: OpusHead starts the session
 * (with its channel count), OpusTags is skipped, audio goes to the session.
 * A session that did not start (its error event says why) takes nothing
 * more: OpusHead comes once, so the stream cannot start it later
 * (fuzz_deepgram found the audio that followed going to a session never
 * started). */
static int ogg_packet_in(void *user, int index, const unsigned char *pk, size_t len) {
    dg *d = user;
    if (index == 0) {
        int ch = pk[9];
        if (!srv_link_started(d->link) && start_session(d->link, d, ch >= 1 && ch <= 2 ? ch : 2)) {
            d->bad = 1;
            return 1;
        }
        return 0;
    }
    if (!srv_link_started(d->link)) {
        d->bad = 1;
        return 1;
    }
    if (index > 1 && len > 0) srv_link_audio(d->link, pk, len);
    return 0;
}

static void push_ogg(srv_link *l, dg *d, const unsigned char *data, size_t len) {
    const char *why = NULL;
    d->link = l;
    if (srv_ogg_opus_push(&d->og, data, len, ogg_packet_in, d, &why) < 0) {
        send_error(l, "UNSUPPORTED_AUDIO", why, 1);
        d->bad = 1;
    }
}

static void dg_receive(void *st, srv_link *l, int binary, const unsigned char *data, size_t len) {
    dg *d = st;
    if (d->bad) return;
    if (binary) {
        if (len == 0) return;
        if (d->q.enc == E_OPUS && !srv_link_started(l) && len >= 4 && !memcmp(data, "OggS", 4)) d->ogg = 1;
        if (d->ogg) {
            push_ogg(l, d, data, len);
            return;
        }
        if (!srv_link_started(l) && start_session(l, d, 0)) return;
        push_pcm(l, d, data, len);
        return;
    }
    cJSON *msg = cJSON_ParseWithLength((const char *)data, len);
    const cJSON *t = msg ? cJSON_GetObjectItemCaseSensitive(msg, "type") : NULL;
    const char *type = cJSON_IsString(t) ? t->valuestring : NULL;
    if (!type) {
        send_error(l, "INVALID_MESSAGE", "text messages must be JSON with a type (KeepAlive, Finalize, CloseStream)", 0);
    } else if (!strcmp(type, "KeepAlive")) {
        /* nothing: the connection stays open */
    } else if (!strcmp(type, "Finalize")) {
        if (srv_link_started(l)) {
            d->finalize_pending = 1;
            srv_link_flush(l, 0);
        }
    } else if (!strcmp(type, "CloseStream")) {
        srv_link_flush(l, 1);
    } else {
        char why[128];
        snprintf(why, sizeof why, "unknown message type '%.48s' (KeepAlive, Finalize, CloseStream)", type);
        send_error(l, "INVALID_MESSAGE", why, 0);
    }
    cJSON_Delete(msg);
}

/* ---- session events ---------------------------------------------------------------------- */

static cJSON *channel_index(void) {
    cJSON *a = cJSON_CreateArray();
    cJSON_AddItemToArray(a, cJSON_CreateNumber(0));
    cJSON_AddItemToArray(a, cJSON_CreateNumber(1));
    return a;
}

static void send_results(srv_link *l, dg *d, const char *text, double start, double end, int is_final,
                         int speech_final, int from_finalize) {
    while (*text == ' ') text++;
    cJSON *o = cJSON_CreateObject();
    if (!o) return;
    cJSON_AddStringToObject(o, "type", "Results");
    cJSON_AddItemToObject(o, "channel_index", channel_index());
    cJSON_AddNumberToObject(o, "duration", end > start ? end - start : 0);
    cJSON_AddNumberToObject(o, "start", start);
    cJSON_AddBoolToObject(o, "is_final", is_final);
    cJSON_AddBoolToObject(o, "speech_final", speech_final);
    cJSON_AddBoolToObject(o, "from_finalize", from_finalize);
    cJSON *ch = cJSON_AddObjectToObject(o, "channel"), *alts = cJSON_AddArrayToObject(ch, "alternatives");
    cJSON *alt = cJSON_CreateObject();
    cJSON_AddItemToArray(alts, alt);
    cJSON_AddStringToObject(alt, "transcript", text);
    cJSON_AddNumberToObject(alt, "confidence", 1.0); /* sotto has no confidence: docs/COMPAT.md */
    cJSON *words = cJSON_AddArrayToObject(alt, "words");
    sotto_word_span ws[512];
    int n = sotto_cue_words(text, start, end, ws, 512);
    for (int k = 0; k < n; k++) {
        char pw[256], w[256];
        snprintf(pw, sizeof pw, "%.*s", (int)ws[k].len, text + ws[k].off);
        size_t m = 0; /* the word: lower case, without punctuation */
        for (const char *p = pw; *p && m + 1 < sizeof w; p++)
            if (!ispunct((unsigned char)*p) || *p == '\'' || *p == '-') w[m++] = (char)tolower((unsigned char)*p);
        w[m] = '\0';
        cJSON *wj = cJSON_CreateObject();
        cJSON_AddStringToObject(wj, "word", w);
        cJSON_AddNumberToObject(wj, "start", ws[k].start);
        cJSON_AddNumberToObject(wj, "end", ws[k].end);
        cJSON_AddNumberToObject(wj, "confidence", 1.0);
        cJSON_AddStringToObject(wj, "punctuated_word", pw);
        cJSON_AddItemToArray(words, wj);
    }
    cJSON *md = cJSON_AddObjectToObject(o, "metadata");
    cJSON_AddStringToObject(md, "request_id", d->request_id);
    cJSON *mi = cJSON_AddObjectToObject(md, "model_info");
    const char *name = d->ss->sm ? d->ss->sm->name : "sotto";
    cJSON_AddStringToObject(mi, "name", name);
    cJSON_AddStringToObject(mi, "version", d->ss->sm ? sotto_wfmt_name(d->ss->sm->weights) : "");
    cJSON_AddStringToObject(mi, "arch", "whisper");
    cJSON_AddStringToObject(md, "model_uuid", name);
    send_obj(l, o);
}

static void dg_translate(void *st, srv_link *l, const srv_event *ev) {
    dg *d = st;
    if (ev->type == SRV_EV_ACK) {
        double off = ev->offset;
        d->audio_s = d->ss->encoding == SOTTO_ENCODING_OPUS ? off * 0.02 : off / (d->q.rate ? d->q.rate : 16000);
    } else if (ev->type == SRV_EV_SPEECH_START) {
        d->utt_start = ev->start;
        d->last_interim[0] = '\0';
        if (d->q.vad_events) {
            cJSON *o = cJSON_CreateObject();
            if (!o) return;
            cJSON_AddStringToObject(o, "type", "SpeechStarted");
            cJSON *c = cJSON_AddArrayToObject(o, "channel");
            cJSON_AddItemToArray(c, cJSON_CreateNumber(0));
            cJSON_AddNumberToObject(o, "timestamp", d->utt_start);
            send_obj(l, o);
        }
    } else if (ev->type == SRV_EV_PARTIAL && d->q.interim) {
        const char *c = ev->committed, *t = ev->tentative;
        char text[2048];
        snprintf(text, sizeof text, "%s%s", c ? c : "", t ? t : "");
        if (!strcmp(text, d->last_interim)) return;
        snprintf(d->last_interim, sizeof d->last_interim, "%s", text);
        send_results(l, d, text, d->utt_start, d->audio_s > d->utt_start ? d->audio_s : d->utt_start, 0, 0, 0);
    } else if (ev->type == SRV_EV_SPEECH_END) {
        int u = ev->utterance;
        if (u > 0) d->ended[u % 64] = u;
    } else if (ev->type == SRV_EV_FINAL) {
        int utt = ev->utterance;
        const char *text = ev->text;
        double start = ev->start, end = ev->end;
        int speech_final = utt > 0 && d->ended[utt % 64] == utt;
        send_results(l, d, text ? text : "", start, end, 1, speech_final, d->finalize_pending);
        d->finalize_pending = 0;
        d->last_interim[0] = '\0';
        if (d->q.utterance_end_ms && speech_final) {
            cJSON *o = cJSON_CreateObject();
            if (!o) return;
            cJSON_AddStringToObject(o, "type", "UtteranceEnd");
            cJSON_AddItemToObject(o, "channel", channel_index());
            cJSON_AddNumberToObject(o, "last_word_end", end);
            send_obj(l, o);
        }
    } else if (ev->type == SRV_EV_ERROR) {
        const char *code = ev->code, *msg = ev->message;
        int fatal = ev->fatal;
        char variant[64];
        snprintf(variant, sizeof variant, "%s", code ? code : "error");
        for (char *p = variant; *p; p++) *p = (char)toupper((unsigned char)*p);
        send_error(l, variant, msg ? msg : "error", fatal);
    } else if (ev->type == SRV_EV_DONE) {
        cJSON *o = cJSON_CreateObject();
        if (!o) return;
        cJSON_AddStringToObject(o, "type", "Metadata");
        cJSON_AddStringToObject(o, "transaction_key", "deprecated");
        cJSON_AddStringToObject(o, "request_id", d->request_id);
        cJSON_AddStringToObject(o, "sha256", "");
        cJSON_AddStringToObject(o, "created", d->created);
        cJSON_AddNumberToObject(o, "duration", ev->audio_s + ev->dropped_s);
        cJSON_AddNumberToObject(o, "channels", 1);
        cJSON_AddItemToObject(o, "models", cJSON_CreateArray());
        cJSON_AddItemToObject(o, "model_info", cJSON_CreateObject());
        send_obj(l, o);
    }
    /* hello, ready, commit, language, warning, pong: nothing to say */
}

const srv_dialect srv_dialect_deepgram = {"deepgram", dg_open, NULL, dg_receive, dg_translate, dg_close};
