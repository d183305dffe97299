/* session.c - session table, lifetimes and event queues. */
#define _POSIX_C_SOURCE 200809L
#include "server.h"

#include "log.h"
#include "v1_event.h"

#include <libwebsockets.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

double srv_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

void srv_wake(srv *s) {
    atomic_store(&s->wake_all, 1);
    if (s->ctx) lws_cancel_service(s->ctx);
}

void srv_session_wake(srv *s, srv_session *ss) {
    pthread_mutex_lock(&s->wake_lock);
    if (ss->in_table && !ss->on_wake_list) {
        ss->wake_next = s->wake_list;
        s->wake_list = ss;
        ss->on_wake_list = 1;
    }
    pthread_mutex_unlock(&s->wake_lock);
    if (s->ctx) lws_cancel_service(s->ctx);
}

srv_session *srv_wake_list_take_locked(srv *s) {
    pthread_mutex_lock(&s->wake_lock);
    srv_session *list = s->wake_list;
    s->wake_list = NULL;
    pthread_mutex_unlock(&s->wake_lock);
    return list;
}

srv_session *srv_wake_list_next_locked(srv *s, srv_session *ss) {
    /* ss stays marked until here, so a wake-up meanwhile leaves its link alone */
    pthread_mutex_lock(&s->wake_lock);
    srv_session *next = ss->wake_next;
    ss->wake_next = NULL;
    ss->on_wake_list = 0;
    pthread_mutex_unlock(&s->wake_lock);
    return next;
}

static void random_hex(char *out, int bytes) {
    unsigned char b[32];
    FILE *f = fopen("/dev/urandom", "rb");
    size_t got = f ? fread(b, 1, (size_t)bytes, f) : 0;
    if (f) fclose(f);
    for (int i = (int)got; i < bytes; i++) b[i] = (unsigned char)(rand() ^ (int)srv_now());
    for (int i = 0; i < bytes; i++) sprintf(out + 2 * i, "%02x", b[i]);
}

srv_session *srv_session_new(srv *s) {
    srv_session *ss = calloc(1, sizeof *ss);
    if (!ss) return NULL;
    pthread_mutex_init(&ss->lock, NULL);
    ss->srv = s;
    ss->next_seq = 1;
    ss->first_kept = 1;
    ss->refs = 1; /* the table's */
    ss->owner = -1;
    sotto_pace_init(&ss->pace);
    random_hex(ss->token, 16);
    pthread_mutex_lock(&s->lock);
    ss->id = ++s->next_id;
    char rnd[9];
    random_hex(rnd, 4);
    snprintf(ss->id_str, sizeof ss->id_str, "s%llu-%s", (unsigned long long)ss->id, rnd);
    ss->next = s->sessions;
    s->sessions = ss;
    s->n_sessions++;
    ss->in_table = 1; /* nobody can wake it before it is in the table */
    pthread_mutex_unlock(&s->lock);
    atomic_fetch_add(&s->m.sessions_total, 1);
    return ss;
}

static void session_free(srv *s, srv_session *ss) {
    /* finished and everything sent: nobody will resume it (else its checkpoint expires) */
    if (ss->state == SESS_DONE && !ss->moved && ss->sent_upto + 1 >= ss->next_seq) srv_checkpoint_forget(s, ss);
    if (ss->sm) srv_model_release(s, ss->sm);
    sotto_audio_in_free(ss->ain);
    sotto_dictation_free(ss->dict);
    for (int i = 0; i < SRV_EVENT_RING; i++) srv_event_clear(&ss->ring[i]);
    free(ss->pending);
    free(ss->prompt);
    free(ss->prompt_tokens);
    free(ss->start_json);
    free(ss->restore_ctx);
    free(ss->restore_committed);
    cJSON_Delete(ss->finals);
    srv_feed_free_captions(ss);
    free(ss->viewers);
    pthread_mutex_destroy(&ss->lock);
    free(ss);
}

void srv_session_ref(srv *s, srv_session *ss) {
    pthread_mutex_lock(&s->lock);
    ss->refs++;
    pthread_mutex_unlock(&s->lock);
}

/* Removes ss from the table (srv->lock held) and drops the table's ref. */
static int unlink_locked(srv *s, srv_session *ss) {
    for (srv_session **p = &s->sessions; *p; p = &(*p)->next) {
        if (*p == ss) {
            *p = ss->next;
            s->n_sessions--;
            pthread_mutex_lock(&s->wake_lock); /* out of the wake-up list with it */
            if (ss->on_wake_list) {
                srv_session **w = &s->wake_list;
                while (*w != ss) w = &(*w)->wake_next;
                *w = ss->wake_next;
                ss->on_wake_list = 0;
            }
            ss->in_table = 0;
            pthread_mutex_unlock(&s->wake_lock);
            return --ss->refs == 0;
        }
    }
    return 0;
}

void srv_session_unref(srv *s, srv_session *ss) {
    pthread_mutex_lock(&s->lock);
    int last = --ss->refs == 0;
    pthread_mutex_unlock(&s->lock);
    if (last) session_free(s, ss);
}

srv_session *srv_session_find(srv *s, const char *id_str) {
    srv_session *found = NULL;
    pthread_mutex_lock(&s->lock);
    for (srv_session *ss = s->sessions; ss; ss = ss->next)
        if (strcmp(ss->id_str, id_str) == 0) {
            found = ss;
            ss->refs++;
            break;
        }
    pthread_mutex_unlock(&s->lock);
    return found;
}

int srv_session_detached_locked(const srv_session *ss) {
    return !ss->wsi && ss->detached_at > 0 && ss->state != SESS_NEW;
}

/* The detached session that lost its connection first, or NULL. srv->lock held. */
static srv_session *oldest_detached_locked(srv *s) {
    srv_session *oldest = NULL;
    for (srv_session *ss = s->sessions; ss; ss = ss->next)
        if (srv_session_detached_locked(ss) && (!oldest || ss->detached_at < oldest->detached_at)) oldest = ss;
    return oldest;
}

/* One batch of srv_sessions_reap: returns how many it freed (at most 64). */
static int reap_batch(srv *s) {
    double now = srv_now();
    srv_session *dead[64];
    int n = 0, evicted = 0, let_go = 0;
    pthread_mutex_lock(&s->lock);
    int detached = 0;
    for (srv_session *ss = s->sessions, *next; ss && n < 64; ss = next) {
        next = ss->next;
        int expired = !ss->wsi && ss->detached_at > 0 &&
                      (now - ss->detached_at > s->opt.resume_grace_s ||
                       (ss->state == SESS_DONE && !ss->feed[0]) || ss->state == SESS_NEW || ss->superseded);
        /* (a finished feed stays for the grace period: its captions can still be fetched;
           a session restored on another instance goes at once: that one holds it now) */
        if (expired) {
            let_go += ss->superseded;
            if (unlink_locked(s, ss)) dead[n++] = ss;
        } else {
            detached += srv_session_detached_locked(ss);
        }
    }
    /* --max-detached: the oldest go first, so that churn cannot pile them up */
    for (; detached > s->opt.max_detached && n < 64; detached--, evicted++) {
        srv_session *ss = oldest_detached_locked(s);
        if (!ss) break;
        if (unlink_locked(s, ss)) dead[n++] = ss;
    }
    pthread_mutex_unlock(&s->lock);
    if (let_go) atomic_fetch_add(&s->m.sessions_let_go, (uint64_t)let_go);
    if (evicted) {
        atomic_fetch_add(&s->m.sessions_evicted, (uint64_t)evicted);
        SOTTO_INFO("%d detached session(s) dropped: more than --max-detached %d", evicted,
                   s->opt.max_detached);
    }
    for (int i = 0; i < n; i++) {
        sotto_log(SOTTO_LOG_INFO, dead[i]->id, "session ended");
        session_free(s, dead[i]);
    }
    return n;
}

void srv_sessions_reap(srv *s) {
    /* all of them: thousands of connections can close between two wake-ups that reap */
    while (reap_batch(s) == 64) {
    }
}

void srv_session_push_locked(srv *s, srv_session *ss, const float *x, size_t n) {
    if (ss->skip_samples) { /* restored: the audio before the durable point is final already */
        size_t skip = ss->skip_samples < n ? (size_t)ss->skip_samples : n;
        ss->skip_samples -= skip;
        x += skip, n -= skip;
        if (!n) return;
    }
    sotto_dictation_push(ss->dict, x, n);
    /* the wall time a pass became due (the scheduler's age, the overload policy's wait):
       when the audio that made it due arrived, not when the worker next looked */
    if (ss->pass_due_since == 0 && sotto_dictation_pass_due(ss->dict)) ss->pass_due_since = srv_now();
    sotto_dictation_stats st;
    /* a speculative pass's result became a final as the VAD ended its utterance */
    if (srv_session_count_locked(s, ss, &st)) srv_checkpoint_maybe_locked(s, ss, 0);
    sotto_pace_update(&ss->pace, st.samples_in, srv_now());
}

int srv_session_count_locked(srv *s, srv_session *ss, sotto_dictation_stats *st) {
    sotto_dictation_get_stats(ss->dict, st);
    int finals = st->samples_final != ss->final_samples_seen;
    atomic_fetch_add(&s->m.audio_final_samples, st->samples_final - ss->final_samples_seen);
    ss->final_samples_seen = st->samples_final;
    atomic_fetch_add(&s->m.audio_dropped_samples, st->samples_dropped - ss->dropped_samples_seen);
    ss->dropped_samples_seen = st->samples_dropped;
    atomic_fetch_add(&s->m.spec_passes, st->spec_passes - ss->spec_passes_seen);
    ss->spec_passes_seen = st->spec_passes;
    atomic_fetch_add(&s->m.spec_used, st->spec_used - ss->spec_used_seen);
    ss->spec_used_seen = st->spec_used;
    atomic_fetch_add(&s->m.tails_dropped, st->tails_dropped - ss->tails_dropped_seen);
    ss->tails_dropped_seen = st->tails_dropped;
    return finals;
}

/* ---- events ------------------------------------------------------------------ */

/* Numbers an event, notes it for the checkpoint and the feed, prints its
 * JSON into the ring beside its typed fields and wakes the writer. Takes ev
 * and what e owns. */
static void ring_put_locked(srv *s, srv_session *ss, cJSON *ev, srv_event *e) {
    uint64_t seq = ss->next_seq++;
    cJSON_AddNumberToObject(ev, "seq", (double)seq);
    int final = e->type == SRV_EV_FINAL, ack = e->type == SRV_EV_ACK;
    int utt = e->type == SRV_EV_PARTIAL || e->type == SRV_EV_COMMIT || final ? e->utterance : 0;
    e->viewer = srv_event_for_viewers(e->type);
    if (final) srv_checkpoint_note_final_locked(ss, ev);
    else if (e->type == SRV_EV_COMMIT) srv_checkpoint_note_commit_locked(ss);
    char *json = cJSON_PrintUnformatted(ev);
    if (json && e->viewer && ss->feed[0] && s->persist)
        srv_feed_remote_publish_locked(s, ss, json, strlen(json), ev, final, e->type == SRV_EV_DONE);
    cJSON_Delete(ev);
    if (!json) {
        sotto_log(SOTTO_LOG_WARN, ss->id, "out of memory: an event was not sent");
        srv_event_clear(e);
        return;
    }
    srv_event *slot = &ss->ring[seq % SRV_EVENT_RING];
    if (slot->json) { /* overwriting the oldest kept event */
        if (slot->seq > ss->sent_upto) { /* never sent: the client lags */
            ss->dropped_events++;
            atomic_fetch_add(&s->m.events_dropped, 1);
            if (!slot->superseded && !ss->closing) {
                /* a commit or final would be lost: cull the lagging client
                 * (it may resume from the events still kept) */
                ss->closing = 1;
                sotto_log(SOTTO_LOG_WARN, ss->id, "client too slow: %d events unsent",
                          SRV_EVENT_RING);
            }
        }
        ss->first_kept = slot->seq + 1;
        srv_event_clear(slot);
    }
    *slot = *e; /* the strings move into the ring */
    memset(e, 0, sizeof *e);
    slot->seq = seq;
    slot->json = json;
    slot->len = strlen(json);
    slot->superseded = 0;
    /* the previous partial of this utterance, or the previous ack, is stale now; when the
       connection lags, the writer skips it (earlier ones were marked when it came) */
    uint64_t *prev = ack ? &ss->last_ack_seq : utt ? &ss->last_partial_seq : NULL;
    if (prev && *prev > ss->sent_upto && *prev >= ss->first_kept && *prev < seq) {
        srv_event *o = &ss->ring[*prev % SRV_EVENT_RING];
        if (o->seq == *prev && (ack || (o->type == SRV_EV_PARTIAL && o->utterance == utt))) o->superseded = 1;
    }
    if (ack) ss->last_ack_seq = seq;
    if (slot->type == SRV_EV_PARTIAL) ss->last_partial_seq = seq;
    srv_session_wake(s, ss);
}

void srv_session_emit_locked(srv *s, srv_session *ss, cJSON *ev) {
    if (!ev) return;
    /* The server's own messages, and events that come back as JSON: finals
       replayed from a checkpoint, a remote feed's events (fleet.c). */
    srv_event e;
    if (srv_event_from_json(&e, ev)) {
        cJSON_Delete(ev);
        sotto_log(SOTTO_LOG_WARN, ss->id, "out of memory: an event was not sent");
        return;
    }
    if (e.type == SRV_EV_FINAL && ss->feed[0]) srv_feed_add_final_json(ss, ev);
    ring_put_locked(s, ss, ev, &e);
}

void srv_session_emit_event_locked(srv *s, srv_session *ss, const sotto_event *ev) {
    if (ev->kind == SOTTO_EVENT_FINAL && ss->feed[0])
        srv_feed_add_final(ss, ev->text, sotto_event_seconds(ev->start), sotto_event_seconds(ev->end),
                           (int)ev->utterance);
    srv_event e;
    cJSON *json = srv_v1_event_json(ev);
    if (!json || srv_event_from_dictation(&e, ev)) {
        cJSON_Delete(json);
        sotto_log(SOTTO_LOG_WARN, ss->id, "out of memory: a %s event was not sent",
                  sotto_event_kind_name(ev->kind));
        return;
    }
    ring_put_locked(s, ss, json, &e);
}

void srv_session_emit(srv *s, srv_session *ss, cJSON *ev) {
    pthread_mutex_lock(&ss->lock);
    srv_session_emit_locked(s, ss, ev);
    pthread_mutex_unlock(&ss->lock);
}

void srv_session_error(srv *s, srv_session *ss, const char *code, const char *msg, int fatal) {
    cJSON *e = cJSON_CreateObject();
    if (!e) return;
    cJSON_AddStringToObject(e, "type", "error");
    cJSON_AddStringToObject(e, "code", code);
    cJSON_AddStringToObject(e, "message", msg);
    cJSON_AddBoolToObject(e, "fatal", fatal);
    pthread_mutex_lock(&ss->lock);
    srv_session_emit_locked(s, ss, e);
    if (fatal) {
        ss->fatal = 1;
        ss->closing = 1;
    }
    pthread_mutex_unlock(&ss->lock);
    atomic_fetch_add(&s->m.bad_messages, 1);
    sotto_log(SOTTO_LOG_INFO, ss->id, "error %s: %s", code, msg);
}
