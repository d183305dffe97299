/* checkpoint.c - what a session must keep so that it can go on on another
 * instance (issue 16): the durable point of its audio, and the checkpoint
 * document written to Redis (persist.h) at each final.
 *
 * The durable point is the dictation's (include/dictation.h): everything
 * before it is final and sent, nothing after it is in a final. Clients
 * count audio in units (PCM frames, Opus packets), so each audio message
 * leaves a mark (units, samples) and the durable offset is the newest mark
 * at or before the durable sample; a restored session drops the samples
 * between that mark and the durable sample, so it continues exactly there.
 *
 * The document (JSON): {"v":1, "epoch", "id", "token", "owner", "start"
 * (the start message), "next_seq", "units", "units_sample", "durable",
 * "next_utterance", "context" (token ids of the latest finalized text),
 * "finals" (the latest SRV_FINALS_KEPT final events, with their seq)}.
 */
#define _POSIX_C_SOURCE 200809L
#include "server.h"

#include "log.h"
#include "persist.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MARK_MIN_SAMPLES 800           /* 50 ms between marks */
#define CKPT_DURABLE_STEP (5 * 16000)  /* a checkpoint when the durable point moved this far */

void srv_mark_add_locked(srv_session *ss) {
    srv_mark m = {ss->units_in, ss->samples_out};
    if (ss->n_marks) {
        srv_mark *last = &ss->marks[(ss->mark_head + ss->n_marks - 1) % SRV_MARKS];
        if (m.samples < last->samples + MARK_MIN_SAMPLES) return;
    }
    if (ss->n_marks == SRV_MARKS) { /* drop the oldest */
        ss->mark_base = ss->marks[ss->mark_head];
        ss->mark_head = (ss->mark_head + 1) % SRV_MARKS;
        ss->n_marks--;
    }
    ss->marks[(ss->mark_head + ss->n_marks) % SRV_MARKS] = m;
    ss->n_marks++;
}

void srv_durable_locked(srv_session *ss, uint64_t *units, uint64_t *at_sample, uint64_t *durable) {
    uint64_t d = ss->dict ? sotto_dictation_durable(ss->dict) : ss->restore ? ss->restore_at : 0;
    srv_mark best = ss->mark_base;
    /* marks are in time order: the newest with samples <= d */
    int lo = 0, hi = ss->n_marks - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        const srv_mark *m = &ss->marks[(ss->mark_head + mid) % SRV_MARKS];
        if (m->samples <= d) {
            best = *m;
            lo = mid + 1;
        } else {
            hi = mid - 1;
        }
    }
    if (best.samples > d) d = best.samples; /* cannot happen: the base is the start */
    *units = best.units;
    *at_sample = best.samples;
    *durable = d;
}

void srv_checkpoint_note_final_locked(srv_session *ss, const cJSON *final_event) {
    if (!ss->srv || !ss->srv->persist || !ss->start_json) return; /* feed proxies have no srv */
    if (!ss->finals && !(ss->finals = cJSON_CreateArray())) return;
    cJSON *copy = cJSON_Duplicate(final_event, 1);
    if (!copy) return;
    cJSON_AddItemToArray(ss->finals, copy);
    while (cJSON_GetArraySize(ss->finals) > SRV_FINALS_KEPT) cJSON_DeleteItemFromArray(ss->finals, 0);
    ss->ckpt_due = 1;
}

void srv_checkpoint_note_commit_locked(srv_session *ss) {
    if (ss->srv && ss->srv->persist && ss->start_json) ss->ckpt_due = 1;
}

static cJSON *build_doc_locked(srv *s, srv_session *ss, uint64_t units, uint64_t at, uint64_t durable) {
    cJSON *d = cJSON_CreateObject(), *start = cJSON_Parse(ss->start_json);
    if (!d || !start) {
        cJSON_Delete(d);
        cJSON_Delete(start);
        return NULL;
    }
    cJSON_AddNumberToObject(d, "v", 1);
    cJSON_AddNumberToObject(d, "epoch", (double)ss->epoch);
    cJSON_AddStringToObject(d, "id", ss->id_str);
    cJSON_AddStringToObject(d, "token", ss->token);
    cJSON_AddNumberToObject(d, "owner", ss->owner);
    cJSON_AddStringToObject(d, "instance", s->opt.instance);
    cJSON_AddItemToObject(d, "start", start);
    cJSON_AddNumberToObject(d, "next_seq", (double)ss->next_seq);
    cJSON_AddNumberToObject(d, "units", (double)units);
    cJSON_AddNumberToObject(d, "units_sample", (double)at);
    cJSON_AddNumberToObject(d, "durable", (double)durable);
    const int32_t *ctx = NULL;
    int n_ctx = 0;
    uint64_t next_utt = ss->restore ? ss->restore_utterance : 1;
    if (ss->dict) {
        sotto_dictation_get_context(ss->dict, &ctx, &n_ctx);
        next_utt = sotto_dictation_next_utterance(ss->dict);
    } else if (ss->restore) {
        ctx = ss->restore_ctx, n_ctx = ss->n_restore_ctx;
    }
    cJSON_AddNumberToObject(d, "next_utterance", (double)next_utt);
    cJSON_AddItemToObject(d, "context", n_ctx ? cJSON_CreateIntArray(ctx, n_ctx) : cJSON_CreateArray());
    /* the open utterance's committed tokens (it restarts at the durable point with them) */
    const int32_t *ct = NULL;
    int n_ct = 0;
    uint64_t bound = durable;
    if (ss->dict) {
        uint64_t u = sotto_dictation_get_committed(ss->dict, &ct, &n_ct, &bound);
        if (u != next_utt) n_ct = 0;
    } else if (ss->restore) {
        ct = ss->restore_committed, n_ct = ss->n_restore_committed, bound = ss->restore_bound;
    }
    cJSON_AddItemToObject(d, "committed", n_ct ? cJSON_CreateIntArray(ct, n_ct) : cJSON_CreateArray());
    cJSON_AddNumberToObject(d, "commit_bound", (double)bound);
    cJSON_AddItemToObject(d, "finals", ss->finals ? cJSON_Duplicate(ss->finals, 1) : cJSON_CreateArray());
    return d;
}

uint64_t srv_durable_units_locked(srv *s, srv_session *ss) {
    if (s->persist) return ss->start_json ? ss->durable_written : 0;
    uint64_t units, at, durable;
    srv_durable_locked(ss, &units, &at, &durable);
    return units;
}

void srv_checkpoint_written(void *user, const char *id, uint64_t epoch, uint64_t units) {
    srv *s = user;
    srv_session *ss = srv_session_find(s, id);
    if (!ss) return;
    pthread_mutex_lock(&ss->lock);
    if (ss->epoch == epoch && units > ss->durable_written) ss->durable_written = units;
    pthread_mutex_unlock(&ss->lock);
    srv_session_unref(s, ss);
}

int srv_checkpoint_detached(void *user, srv_persist_watch *out, int max) {
    srv *s = user;
    int n = 0;
    pthread_mutex_lock(&s->lock);
    for (srv_session *ss = s->sessions; ss && n < max; ss = ss->next) {
        pthread_mutex_lock(&ss->lock);
        if (srv_session_detached_locked(ss) && ss->start_json && !ss->superseded) {
            snprintf(out[n].id, sizeof out[n].id, "%s", ss->id_str);
            out[n++].epoch = ss->epoch;
        }
        pthread_mutex_unlock(&ss->lock);
    }
    pthread_mutex_unlock(&s->lock);
    return n;
}

void srv_checkpoint_superseded(void *user, const char *id) {
    srv *s = user;
    srv_session *ss = srv_session_find(s, id);
    if (!ss) return;
    pthread_mutex_lock(&ss->lock);
    if (!ss->superseded) {
        if (!ss->wsi) {
            ss->superseded = 1; /* the next reap drops it */
            sotto_log(SOTTO_LOG_INFO, ss->id, "%s was restored on another instance: letting go of it here", ss->id_str);
        } else if (!ss->moved) { /* two clients? this one keeps it, but can no longer checkpoint it */
            ss->superseded = 1;
            sotto_log(SOTTO_LOG_WARN, ss->id, "%s was restored on another instance while its connection here is "
                                              "open: its checkpoints here are refused from now on", ss->id_str);
        }
    }
    pthread_mutex_unlock(&ss->lock);
    srv_session_unref(s, ss);
    srv_wake(s);
}

void srv_checkpoint_reconnected(void *user) {
    srv *s = user;
    atomic_fetch_add(&s->ckpt_gen, 1);
    srv_wake(s); /* the service thread's wake-up checkpoints every session */
}

void srv_checkpoint_maybe_locked(srv *s, srv_session *ss, int force) {
    if (!s->persist || !ss->start_json || ss->superseded) return; /* superseded: Redis would refuse it */
    uint64_t gen = atomic_load(&s->ckpt_gen);
    if (ss->ckpt_gen_seen != gen) force = 1, ss->ckpt_gen_seen = gen;
    uint64_t units, at, durable;
    srv_durable_locked(ss, &units, &at, &durable);
    if (!force && !ss->ckpt_due && durable < ss->ckpt_durable + CKPT_DURABLE_STEP) return;
    double t0 = srv_now();
    cJSON *doc = build_doc_locked(s, ss, units, at, durable);
    char *json = doc ? cJSON_PrintUnformatted(doc) : NULL;
    cJSON_Delete(doc);
    if (!json || srv_persist_put(s->persist, ss->id_str, ss->epoch, units, json, strlen(json)))
        sotto_log(SOTTO_LOG_WARN, ss->id, "checkpoint not queued (out of memory)");
    else
        atomic_fetch_add(&s->m.checkpoint_bytes, strlen(json));
    free(json);
    srv_hist_add(&s->m.checkpoint, srv_now() - t0);
    ss->ckpt_due = 0;
    ss->ckpt_durable = durable;
    ss->ckpt_at = srv_now();
}

void srv_checkpoint_forget(srv *s, srv_session *ss) {
    if (s->persist && ss->start_json) srv_persist_del(s->persist, ss->id_str, ss->epoch);
}

static int jnum_u64(const cJSON *o, const char *k, uint64_t *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble > 9e15) return -1;
    *out = (uint64_t)v->valuedouble;
    return 0;
}

/* A checkpoint's array of token ids (NULL arr: none): malloc'd, entries that are not ids skipped. */
static int32_t *token_array(const cJSON *arr, int *n_out) {
    int n = arr ? cJSON_GetArraySize(arr) : 0;
    int32_t *t = n ? malloc(sizeof(int32_t) * (size_t)n) : NULL;
    *n_out = 0;
    for (int i = 0; t && i < n; i++) {
        const cJSON *v = cJSON_GetArrayItem(arr, i);
        if (cJSON_IsNumber(v) && v->valuedouble >= 0 && v->valuedouble < 1e6) t[(*n_out)++] = (int32_t)v->valuedouble;
    }
    return t;
}

int srv_checkpoint_restore(srv *s, srv_session *ss, const char *id, const char *token, uint64_t last_seq) {
    if (!s->persist) return 1;
    char why[256] = "";
    int found = 0;
    char *json = srv_persist_get(s->persist, id, &found, why, sizeof why);
    if (found < 0) {
        char msg[400];
        snprintf(msg, sizeof msg, "the session is not on this instance and its checkpoint cannot be read (%s); "
                 "try again", why);
        srv_session_error(s, ss, "store_unavailable", msg, 0);
        return -1;
    }
    if (!json) return 1;
    cJSON *d = cJSON_Parse(json);
    free(json);
    if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(d, "finished"))) { /* a tombstone (persist.h) */
        cJSON_Delete(d);
        return 1;
    }
    const cJSON *tok = cJSON_GetObjectItemCaseSensitive(d, "token");
    const cJSON *owner = cJSON_GetObjectItemCaseSensitive(d, "owner");
    const cJSON *start = cJSON_GetObjectItemCaseSensitive(d, "start");
    const cJSON *ctx = cJSON_GetObjectItemCaseSensitive(d, "context");
    const cJSON *finals = cJSON_GetObjectItemCaseSensitive(d, "finals");
    const cJSON *committed = cJSON_GetObjectItemCaseSensitive(d, "committed");
    uint64_t commit_bound = 0;
    uint64_t epoch, next_seq, units, at, durable, next_utt;
    if (!d || !cJSON_IsString(tok) || !cJSON_IsNumber(owner) || !cJSON_IsObject(start) || !cJSON_IsArray(ctx) ||
        !cJSON_IsArray(finals) || jnum_u64(d, "epoch", &epoch) || jnum_u64(d, "next_seq", &next_seq) ||
        jnum_u64(d, "units", &units) || jnum_u64(d, "units_sample", &at) || jnum_u64(d, "durable", &durable) ||
        jnum_u64(d, "next_utterance", &next_utt) || at > durable || next_seq < 1 || next_utt < 1 ||
        (committed && !cJSON_IsArray(committed)) || cJSON_GetArraySize(committed) > SOTTO_AGREEMENT_MAX_TOKENS) {
        cJSON_Delete(d);
        sotto_log(SOTTO_LOG_WARN, ss->id, "resume of %.40s: its checkpoint is malformed", id);
        return 1;
    }
    /* a wrong token or another key's session: as if it did not exist */
    if (strcmp(tok->valuestring, token) != 0 || owner->valueint != ss->owner) {
        cJSON_Delete(d);
        return 1;
    }
    /* the new session takes the old one's identity */
    pthread_mutex_lock(&s->lock);
    snprintf(ss->id_str, sizeof ss->id_str, "%s", id);
    snprintf(ss->token, sizeof ss->token, "%s", tok->valuestring);
    pthread_mutex_unlock(&s->lock);
    /* everything the worker needs before srv_session_start lets it initialize the session */
    pthread_mutex_lock(&ss->lock);
    ss->epoch = epoch + 1;
    ss->restore = 1;
    ss->restore_at = durable;
    ss->restore_utterance = next_utt;
    ss->restore_ctx = token_array(ctx, &ss->n_restore_ctx);
    jnum_u64(d, "commit_bound", &commit_bound);
    ss->restore_committed = token_array(committed, &ss->n_restore_committed);
    ss->restore_bound = commit_bound;
    ss->units_in = ss->units_acked_sent = ss->durable_written = units;
    ss->ckpt_gen_seen = atomic_load(&s->ckpt_gen);
    ss->samples_out = at;
    ss->skip_samples = durable - at;
    ss->mark_base = (srv_mark){units, at};
    ss->n_marks = ss->mark_head = 0;
    /* numbering goes on after the newest event the client has (the checkpoint may be
       older) and the old session's; this connection's hello is not resent */
    if (last_seq + 1 > next_seq) next_seq = last_seq + 1;
    if (next_seq > ss->next_seq) {
        ss->next_seq = next_seq;
        ss->first_kept = next_seq;
        ss->sent_upto = next_seq - 1;
    }
    ss->finals = cJSON_Duplicate(finals, 1);
    pthread_mutex_unlock(&ss->lock);
    srv_session_start(s, ss, start);
    if (ss->state == SESS_NEW) { /* refused here (error sent): model, limits, feed */
        pthread_mutex_lock(&ss->lock);
        ss->restore = 0;
        ss->state = SESS_DONE; /* it has the old id now: it must not be found, resumed or started */
        ss->closing = 1;
        ss->moved = 1; /* and its checkpoint stays for a resume elsewhere */
        pthread_mutex_unlock(&ss->lock);
        cJSON_Delete(d);
        return -1;
    }
    pthread_mutex_lock(&ss->lock);
    /* the finals the client may not have seen, again (the utterance id tells duplicates) */
    int replayed = 0;
    const cJSON *f;
    cJSON_ArrayForEach(f, finals) {
        uint64_t seq;
        if (!cJSON_IsObject(f) || jnum_u64(f, "seq", &seq) || seq <= last_seq) continue;
        cJSON *e = cJSON_Duplicate(f, 1);
        if (!e) continue;
        cJSON_DeleteItemFromObjectCaseSensitive(e, "seq");
        cJSON_AddBoolToObject(e, "replayed", 1);
        srv_session_emit_locked(s, ss, e);
        replayed++;
    }
    cJSON *e = cJSON_CreateObject();
    if (e) {
        cJSON_AddStringToObject(e, "type", "resumed");
        cJSON_AddStringToObject(e, "session", ss->id_str);
        cJSON_AddNumberToObject(e, "offset", (double)units);
        cJSON_AddNumberToObject(e, "durable", (double)units);
        /* partials, commits and acks after last_seq are not kept in checkpoints */
        cJSON_AddBoolToObject(e, "events_lost", last_seq + 1 < next_seq);
        cJSON_AddBoolToObject(e, "restored", 1);
        cJSON_AddNumberToObject(e, "replayed_finals", replayed);
        cJSON_AddNumberToObject(e, "restart_utterance", (double)next_utt);
        if (s->opt.instance[0]) cJSON_AddStringToObject(e, "instance", s->opt.instance);
        srv_session_emit_locked(s, ss, e);
    }
    srv_checkpoint_maybe_locked(s, ss, 1); /* claims it: the old holder's writes are refused */
    pthread_mutex_unlock(&ss->lock);
    cJSON_Delete(d);
    atomic_fetch_add(&s->m.sessions_resumed, 1);
    atomic_fetch_add(&s->m.sessions_restored, 1);
    sotto_log(SOTTO_LOG_INFO, ss->id, "restored %s from its checkpoint (epoch %llu): resend from offset %llu, "
              "%d finals replayed", ss->id_str, (unsigned long long)ss->epoch, (unsigned long long)units, replayed);
    return 0;
}
