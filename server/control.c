/* control.c - a session's operations: start, audio, flush and stop, and the
 * session slots they count against. Every session kind (sotto.v1, the
 * dialects) and the checkpoint restore drive a session through these. The
 * service thread only. */
#define _POSIX_C_SOURCE 200809L
#include "server.h"

#include "start_parse.h"

#include "log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int srv_sessions_busy(srv *s, const srv_session *self) {
    int busy = 0;
    pthread_mutex_lock(&s->lock);
    for (srv_session *ss = s->sessions; ss; ss = ss->next)
        busy += ss != self && ss->wsi &&
                (ss->state == SESS_LOADING || ss->state == SESS_RUNNING || ss->state == SESS_STOPPING);
    pthread_mutex_unlock(&s->lock);
    return busy;
}

int srv_session_slot_free(srv *s, srv_session *ss) {
    if (srv_sessions_busy(s, ss) < s->opt.max_sessions) return 1;
    atomic_fetch_add(&s->m.sessions_rejected, 1);
    srv_session_error(s, ss, "overloaded", "the server has no free session slot", 1);
    return 0;
}

/* ---- small helpers --------------------------------------------------------------- */

/* Tells the client how far its audio was accepted (every 0.25 s of audio, or
 * now when forced), and how far it is durable. */
static void ack(srv *s, srv_session *ss, int force) {
    uint64_t step = ss->encoding == SOTTO_ENCODING_OPUS ? 12 : (uint64_t)ss->sample_rate / 4;
    if (!force && ss->units_in - ss->units_acked_sent < step) return;
    cJSON *e = cJSON_CreateObject();
    if (!e) return;
    cJSON_AddStringToObject(e, "type", "ack");
    cJSON_AddNumberToObject(e, "offset", (double)ss->units_in);
    ss->units_acked_sent = ss->units_in;
    pthread_mutex_lock(&ss->lock);
    srv_checkpoint_maybe_locked(s, ss, 0);
    /* audio the client may forget: a restore never needs it */
    cJSON_AddNumberToObject(e, "durable", (double)srv_durable_units_locked(s, ss));
    srv_session_emit_locked(s, ss, e);
    pthread_mutex_unlock(&ss->lock);
}

/* ---- start, stop, audio ----------------------------------------------------------- */

void srv_session_start(srv *s, srv_session *ss, const cJSON *msg) {
    char why[256];
    if (ss->state != SESS_NEW) {
        srv_session_error(s, ss, "already_started", "the session has already started", 0);
        return;
    }
    if (!srv_session_slot_free(s, ss) || !srv_admission_check(s, ss)) return;
    srv_start st; /* start_parse.c: every check that needs no session */
    const char *code = srv_start_parse(msg, &s->opt, s->silero, &st, why, sizeof why);
    if (code) {
        srv_session_error(s, ss, code, why, 0);
        return;
    }
    srv_model *sm = st.model_too_long ? NULL : srv_model_find(s, st.has_model ? st.model : NULL, st.weights);
    if (!sm) {
        snprintf(why, sizeof why, "unknown model '%s'", st.model);
        srv_session_error(s, ss, "unknown_model", why, 0);
        return;
    }
    int claim = st.has_feed ? srv_feed_claim(s, ss, st.feed, st.has_feed_key ? st.feed_key : NULL) : 0;
    if (claim == 0 && st.has_feed && s->persist) { /* and across the fleet */
        claim = srv_feed_remote_claim(s, ss, st.feed);
        if (claim == 1) {
            sotto_log(SOTTO_LOG_WARN, ss->id, "feed %s: Redis unreachable; published on this instance only", st.feed);
            claim = 0;
        }
        if (claim) {
            pthread_mutex_lock(&s->lock);
            ss->feed[0] = '\0'; /* give the local claim back */
            pthread_mutex_unlock(&s->lock);
        }
    }
    if (claim == -1) {
        snprintf(why, sizeof why, "the feed name '%s' is taken", st.feed);
        srv_session_error(s, ss, "feed_taken", why, 0);
        return;
    }
    if (claim == -2) {
        snprintf(why, sizeof why, "the feed name '%s' belongs to another API key", st.feed);
        srv_session_error(s, ss, "feed_owned", why, 0);
        return;
    }
    ss->dp = st.dp;
    sotto_err err;
    ss->ain = sotto_audio_in_create(st.encoding, st.sample_rate, st.channels, &err);
    if (!ss->ain) {
        srv_session_error(s, ss, "bad_start", err.msg, 0);
        return;
    }
    ss->encoding = st.encoding;
    ss->sample_rate = st.sample_rate;
    ss->channels = st.channels;
    snprintf(ss->language, sizeof ss->language, "%s", st.language);
    ss->task = st.task;
    if (st.has_prompt && !(ss->prompt = strdup(st.prompt))) {
        srv_session_error(s, ss, "internal", "out of memory", 1);
        return;
    }
    pthread_mutex_lock(&s->lock);
    ss->sm = sm;
    sm->refs++;
    ss->state = SESS_LOADING;
    pthread_mutex_unlock(&s->lock);
    char *start_json = cJSON_PrintUnformatted(msg); /* for checkpoints (a restore replays it) */
    pthread_mutex_lock(&ss->lock);
    free(ss->start_json);
    ss->start_json = start_json;
    pthread_mutex_unlock(&ss->lock);
    sotto_log(SOTTO_LOG_INFO, ss->id, "start: %s %d Hz x%d, model %s (%s)", sotto_encoding_name(st.encoding),
              ss->sample_rate, ss->channels, sm->name, sotto_wfmt_name(st.weights));
    srv_loader_kick(s);
}


void srv_session_stop(srv *s, srv_session *ss, int end_of_stream) {
    if (ss->state == SESS_NEW) {
        if (end_of_stream) {
            srv_session_emit(s, ss, cJSON_Parse("{\"type\":\"done\"}"));
            pthread_mutex_lock(&ss->lock);
            ss->state = SESS_DONE;
            ss->closing = 1;
            pthread_mutex_unlock(&ss->lock);
        }
        return;
    }
    if (end_of_stream && ss->ain) { /* the resampler's tail */
        float tail[256];
        size_t n = 0;
        sotto_audio_in_flush(ss->ain, tail, 256, &n);
        pthread_mutex_lock(&ss->lock);
        ss->samples_out += n;
        if (ss->dict) srv_session_push_locked(s, ss, tail, n);
        pthread_mutex_unlock(&ss->lock);
    }
    ack(s, ss, 1);
    pthread_mutex_lock(&ss->lock);
    if (end_of_stream && ss->state != SESS_DONE) ss->state = SESS_STOPPING;
    if (ss->dict)
        sotto_dictation_flush(ss->dict, end_of_stream);
    else if (!end_of_stream)
        ss->flush_pending = 1; /* the model is loading: flush once the audio kept is pushed */
    pthread_mutex_unlock(&ss->lock);
    srv_worker_kick(s);
}

void srv_session_audio(srv *s, srv_session *ss, const unsigned char *data, size_t len) {
    if (ss->state == SESS_NEW) {
        srv_session_error(s, ss, "not_started", "audio before start: send a start message first", 0);
        return;
    }
    if (ss->state >= SESS_STOPPING) {
        srv_session_error(s, ss, "stopped", "audio after stop is ignored", 0);
        return;
    }
    size_t cap = sotto_audio_in_max_out(ss->ain, len);
    float *out = malloc(sizeof(float) * (cap ? cap : 1));
    size_t n = 0;
    sotto_err err;
    if (!out) {
        srv_session_error(s, ss, "internal", "out of memory", 0);
        return;
    }
    sotto_audio_in_stats before, after;
    sotto_audio_in_get_stats(ss->ain, &before);
    int rc = sotto_audio_in_push(ss->ain, data, len, out, cap, &n, &err);
    sotto_audio_in_get_stats(ss->ain, &after);
    if (rc) {
        srv_session_error(s, ss, "bad_audio", err.msg, 0);
        free(out);
        return;
    }
    if (after.bad_packets > before.bad_packets) {
        atomic_fetch_add(&s->m.concealed_packets, after.bad_packets - before.bad_packets);
        cJSON *e = cJSON_CreateObject();
        if (e) {
            cJSON_AddStringToObject(e, "type", "warning");
            cJSON_AddStringToObject(e, "code", "bad_packet");
            cJSON_AddStringToObject(e, "message", "an Opus packet could not be decoded; concealed");
            cJSON_AddNumberToObject(e, "bad_packets", (double)after.bad_packets);
            srv_session_emit(s, ss, e);
        }
    }
    ss->units_in += ss->encoding == SOTTO_ENCODING_OPUS ? 1 : after.input_frames - before.input_frames;
    atomic_fetch_add(&s->m.audio_in_samples, n);
    pthread_mutex_lock(&ss->lock);
    ss->samples_out += n;
    srv_mark_add_locked(ss);
    if (ss->dict) {
        srv_session_push_locked(s, ss, out, n);
    } else { /* model still loading: keep it, bounded */
        size_t limit = (size_t)(s->opt.max_buffer_s * 16000);
        if (ss->n_pending + n > ss->cap_pending && ss->n_pending + n <= limit) {
            size_t cap2 = (ss->n_pending + n) * 2 < limit ? (ss->n_pending + n) * 2 : limit;
            float *np = realloc(ss->pending, sizeof(float) * cap2);
            if (np) ss->pending = np, ss->cap_pending = cap2;
        }
        size_t take = ss->cap_pending - ss->n_pending < n ? ss->cap_pending - ss->n_pending : n;
        if (take) memcpy(ss->pending + ss->n_pending, out, sizeof(float) * take); /* pending is NULL until needed */
        ss->n_pending += take;
        if (take < n) atomic_fetch_add(&s->m.audio_dropped_samples, n - take);
    }
    pthread_mutex_unlock(&ss->lock);
    free(out);
    ack(s, ss, 0);
    srv_worker_kick(s);
}
