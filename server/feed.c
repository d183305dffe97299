/* feed.c - live-caption feeds: a dictation session published under a name
 * (start's "feed", optional "feed_key"); read-only viewers on
 * /v1/feeds/NAME receive its speech_start, partial, commit, final,
 * speech_end and done events, read straight from the session's event ring
 * (each viewer has its own cursor, so a slow viewer costs the speaker
 * nothing: it skips superseded partials, and one that falls out of the ring
 * is dropped); GET /v1/feeds/NAME.vtt or .srt returns the finals so far,
 * re-cut into subtitle-sized cues (sotto_split_cues).
 * See docs/PROTOCOL.md. Viewer lists and captions: session lock. */
#define _POSIX_C_SOURCE 200809L
#include "server.h"

#include "log.h"
#include "subtitle.h"

#include <libwebsockets.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int srv_feed_name_ok(const char *name) {
    size_t n = strlen(name);
    if (n == 0 || n > SRV_FEED_NAME_MAX) return 0;
    for (size_t i = 0; i < n; i++) {
        char c = name[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '-' || c == '_' || c == '.'))
            return 0;
    }
    return name[0] != '.';
}

/* ---- ended feeds ---------------------------------------------------------------- */

/* A feed whose session is gone (reaped after --resume-grace-s, evicted by
 * --max-detached, or freed) is kept here, so that its captions can still be
 * downloaded and a viewer still gets its history: a session-shaped record
 * that holds only the name, key, owner, session number and captions (no
 * model, no decoder, no events), in state SESS_DONE, outside the session
 * table (srv == NULL marks it). Bounded: at most SRV_FEEDS_ENDED_MAX of them, each
 * for at most FEED_ENDED_S seconds after its session went; a newer session
 * under the same name replaces it when that one ends. The list
 * (srv->feeds_ended) and the records' refs: srv->lock (records are released
 * with srv_session_unref, like sessions). */
#define FEED_ENDED_S 3600.0

/* Takes expired records (and, with name, the one of that name) out of the
 * list into out (at most SRV_FEEDS_ENDED_MAX + 1). srv->lock held. */
static int ended_take_locked(srv *s, double now, const char *name, srv_session **out) {
    int n = 0;
    for (int i = 0; i < s->n_feeds_ended;) {
        srv_session *e = s->feeds_ended[i];
        if (now - e->detached_at > FEED_ENDED_S || (name && !strcmp(e->feed, name))) {
            out[n++] = e;
            s->feeds_ended[i] = s->feeds_ended[--s->n_feeds_ended];
        } else {
            i++;
        }
    }
    return n;
}

static void ended_release(srv *s, srv_session **v, int n) { /* srv->lock not held */
    for (int i = 0; i < n; i++) srv_session_unref(s, v[i]);
}

/* From session_free (via srv_feed_free_captions): a published session that
 * started and is going keeps its captions as an ended feed. Takes ss's
 * captions. No lock held. */
static void feed_retire(srv *s, srv_session *ss) {
    if (atomic_load(&s->stop)) return; /* the server is exiting */
    srv_session *e = calloc(1, sizeof *e);
    if (!e) return;
    pthread_mutex_init(&e->lock, NULL);
    e->refs = 1; /* the list's */
    e->id = ss->id;
    e->owner = ss->owner;
    e->state = SESS_DONE;
    e->next_seq = e->first_kept = ss->next_seq; /* no events: a viewer gets the history, then the end */
    snprintf(e->feed, sizeof e->feed, "%s", ss->feed);
    snprintf(e->feed_key, sizeof e->feed_key, "%s", ss->feed_key);
    e->captions = ss->captions;
    e->n_captions = ss->n_captions;
    e->cap_captions = ss->cap_captions;
    ss->captions = NULL;
    ss->n_captions = ss->cap_captions = 0;
    double now = srv_now();
    e->detached_at = now; /* when it ended */
    srv_session *gone[SRV_FEEDS_ENDED_MAX + 2];
    pthread_mutex_lock(&s->lock);
    int n = ended_take_locked(s, now, e->feed, gone);
    srv_session **ended = s->feeds_ended;
    if (s->n_feeds_ended == SRV_FEEDS_ENDED_MAX) { /* full: the oldest goes */
        int oldest = 0;
        for (int i = 1; i < s->n_feeds_ended; i++)
            if (ended[i]->detached_at < ended[oldest]->detached_at) oldest = i;
        gone[n++] = ended[oldest];
        ended[oldest] = ended[--s->n_feeds_ended];
    }
    ended[s->n_feeds_ended++] = e;
    pthread_mutex_unlock(&s->lock);
    ended_release(s, gone, n);
}

/* The session in the table that publishes name, else its ended feed; NULL if
 * neither. Takes a ref. */
srv_session *srv_feed_find(srv *s, const char *name) {
    srv_session *found = NULL, *gone[SRV_FEEDS_ENDED_MAX + 1];
    pthread_mutex_lock(&s->lock);
    int n = ended_take_locked(s, srv_now(), NULL, gone);
    for (srv_session *ss = s->sessions; ss && !found; ss = ss->next)
        if (ss->feed[0] && strcmp(ss->feed, name) == 0) found = ss;
    srv_session *ended = NULL;
    for (int i = 0; i < s->n_feeds_ended && !ended; i++)
        if (!strcmp(s->feeds_ended[i]->feed, name)) ended = s->feeds_ended[i];
    if (found) found->refs++;
    else if (ended) ended->refs++;
    pthread_mutex_unlock(&s->lock);
    ended_release(s, gone, n);
    if (found) return found;
    /* with --redis, Redis knows the newest session under the name, here or elsewhere */
    srv_session *remote = srv_feed_remote_find(s, name);
    if (remote) {
        if (ended) srv_session_unref(s, ended);
        return remote;
    }
    return ended;
}

/* Feed names and the key that first published each: srv->feeds_owned
 * (srv->lock). Bounded: when full, a name that no live session publishes is
 * forgotten. */

/* The session other than except that publishes name, or NULL. srv->lock held. */
static srv_session *holder_locked(srv *s, const char *name, const srv_session *except) {
    for (srv_session *o = s->sessions; o; o = o->next)
        if (o != except && o->feed[0] && strcmp(o->feed, name) == 0) return o;
    return NULL;
}

static int live_locked(srv *s, const char *name, const srv_session *except) {
    return holder_locked(s, name, except) != NULL;
}

/* The owner of name, recording owner as it if the name is new; -2 when
 * another key owns it. srv->lock held. */
static int own_locked(srv *s, const char *name, int owner, const srv_session *ss) {
    if (owner < 0) return 0; /* no keys configured: names belong to nobody */
    for (int i = 0; i < s->n_feeds_owned; i++)
        if (!strcmp(s->feeds_owned[i].name, name)) return s->feeds_owned[i].owner == owner ? 0 : -2;
    int slot = s->n_feeds_owned < SRV_FEEDS_OWNED_MAX ? s->n_feeds_owned++ : -1;
    for (int i = 0; slot < 0 && i < s->n_feeds_owned; i++)
        if (!live_locked(s, s->feeds_owned[i].name, ss)) slot = i;
    if (slot < 0) return 0; /* every remembered name is live: this one is not remembered */
    snprintf(s->feeds_owned[slot].name, sizeof s->feeds_owned[slot].name, "%s", name);
    s->feeds_owned[slot].owner = owner;
    return 0;
}

int srv_feed_claim(srv *s, srv_session *ss, const char *name, const char *key) {
    pthread_mutex_lock(&s->lock);
    /* with --redis the fleet's record in Redis says who owns a name (fleet.c) */
    int rc = s->persist ? 0 : own_locked(s, name, ss->owner, ss);
    srv_session *old = rc ? NULL : holder_locked(s, name, ss);
    if (old) {
        /* a finished feed of the same owner (kept for its captions) gives the name up */
        pthread_mutex_lock(&old->lock);
        if (old->state == SESS_DONE && !old->wsi && old->owner == ss->owner) old->feed[0] = '\0';
        else rc = -1;
        pthread_mutex_unlock(&old->lock);
    }
    if (rc == 0) {
        snprintf(ss->feed, sizeof ss->feed, "%s", name);
        snprintf(ss->feed_key, sizeof ss->feed_key, "%s", key ? key : "");
    }
    pthread_mutex_unlock(&s->lock);
    return rc;
}

void srv_feed_add_final(srv_session *ss, const char *text, double start, double end, int utterance) {
    if (!text) return;
    while (*text == ' ') text++;
    if (!*text) return; /* nothing said */
    if (ss->n_captions == ss->cap_captions) {
        int cap = ss->cap_captions ? ss->cap_captions * 2 : 64;
        srv_caption *nc = realloc(ss->captions, sizeof *nc * (size_t)cap);
        if (!nc) return;
        ss->captions = nc;
        ss->cap_captions = cap;
    }
    char *copy = strdup(text);
    if (!copy) return;
    srv_caption *c = &ss->captions[ss->n_captions++];
    c->text = copy;
    c->start = start;
    c->end = end;
    c->utterance = utterance;
}

void srv_feed_add_final_json(srv_session *ss, const cJSON *ev) {
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(ev, "text");
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(ev, "start");
    const cJSON *b = cJSON_GetObjectItemCaseSensitive(ev, "end");
    const cJSON *u = cJSON_GetObjectItemCaseSensitive(ev, "utterance");
    double start = cJSON_IsNumber(a) ? a->valuedouble : 0;
    srv_feed_add_final(ss, cJSON_IsString(t) ? t->valuestring : "", start,
                       cJSON_IsNumber(b) ? b->valuedouble : start, cJSON_IsNumber(u) ? u->valueint : 0);
}

void srv_feed_free_captions(srv_session *ss) {
    /* a session (not an ended-feed record) that was published and started */
    if (ss->srv && ss->feed[0] && ss->state != SESS_NEW) feed_retire(ss->srv, ss);
    for (int i = 0; i < ss->n_captions; i++) free(ss->captions[i].text);
    free(ss->captions);
    ss->captions = NULL;
    ss->n_captions = ss->cap_captions = 0;
}

/* ---- captions as files ----------------------------------------------------------- */

char *srv_feed_captions(srv_session *ss, int vtt, size_t *len) {
    pthread_mutex_lock(&ss->lock);
    sotto_cue *cues = malloc(sizeof(sotto_cue) * (size_t)(ss->n_captions ? ss->n_captions : 1));
    char *text = NULL;
    int n = 0;
    if (cues) {
        for (; n < ss->n_captions; n++) { /* copies: split outside the session lock */
            char *t = strdup(ss->captions[n].text);
            if (!t) break;
            cues[n] = (sotto_cue){ss->captions[n].start, ss->captions[n].end, t};
        }
    }
    pthread_mutex_unlock(&ss->lock);
    /* one final is a whole utterance (up to 28 s): re-cut into subtitle-sized cues */
    sotto_cue *sub = NULL;
    int ns = cues ? sotto_split_cues(cues, n, NULL, &sub) : -1;
    if (ns >= 0) text = sotto_subtitles(sub, ns, vtt, len);
    sotto_cues_free(sub, ns > 0 ? ns : 0);
    for (int i = 0; i < n; i++) free((char *)cues[i].text);
    free(cues);
    return text;
}

/* The finals so far, as the first event a viewer gets. Session lock held. */
char *srv_feed_history_locked(srv_session *ss) {
    cJSON *e = cJSON_CreateObject(), *arr = cJSON_CreateArray();
    if (!e || !arr) {
        cJSON_Delete(e);
        cJSON_Delete(arr);
        return NULL;
    }
    cJSON_AddStringToObject(e, "type", "feed");
    cJSON_AddStringToObject(e, "feed", ss->feed);
    cJSON_AddNumberToObject(e, "session", (double)ss->id); /* a new number: a new session */
    cJSON_AddNumberToObject(e, "seq", (double)(ss->next_seq - 1));
    cJSON_AddBoolToObject(e, "live", ss->state != SESS_DONE);
    for (int i = 0; i < ss->n_captions; i++) {
        cJSON *c = cJSON_CreateObject();
        if (!c) break;
        cJSON_AddNumberToObject(c, "utterance", ss->captions[i].utterance);
        cJSON_AddStringToObject(c, "text", ss->captions[i].text);
        cJSON_AddNumberToObject(c, "start", ss->captions[i].start);
        cJSON_AddNumberToObject(c, "end", ss->captions[i].end);
        cJSON_AddItemToArray(arr, c);
    }
    cJSON_AddItemToObject(e, "finals", arr);
    char *s = cJSON_PrintUnformatted(e);
    cJSON_Delete(e);
    return s;
}

/* ---- viewers ------------------------------------------------------------------------ */

int srv_feed_viewer_add(srv_session *ss, struct lws *wsi) {
    pthread_mutex_lock(&ss->lock);
    if (ss->n_viewers == ss->cap_viewers) {
        int cap = ss->cap_viewers ? ss->cap_viewers * 2 : 16;
        struct lws **nv = realloc(ss->viewers, sizeof *nv * (size_t)cap);
        if (!nv) {
            pthread_mutex_unlock(&ss->lock);
            return -1;
        }
        ss->viewers = nv;
        ss->cap_viewers = cap;
    }
    ss->viewers[ss->n_viewers++] = wsi;
    pthread_mutex_unlock(&ss->lock);
    return 0;
}

void srv_feed_viewer_remove(srv_session *ss, struct lws *wsi) {
    pthread_mutex_lock(&ss->lock);
    for (int i = 0; i < ss->n_viewers; i++)
        if (ss->viewers[i] == wsi) {
            ss->viewers[i] = ss->viewers[--ss->n_viewers];
            break;
        }
    pthread_mutex_unlock(&ss->lock);
}
