/* fleet.c - what the instances sharing a Redis (--redis) share besides
 * session checkpoints (checkpoint.c, persist.c): live-caption feeds and
 * client tokens (issue 16).
 *
 * Client tokens: a token minted on one instance is stored in Redis
 * (sotto:token:VALUE -> the key's index, expiring with the token), so that
 * any instance accepts it; an instance that does not know a token looks it
 * up there once and keeps it.
 *
 * Publishing: a published session's name is claimed fleet-wide in Redis at
 * start (one live session per name, names owned by the first key), and its
 * viewer events go, in order, to a Redis stream; its finals also go to a
 * list (the history and the .vtt/.srt of any instance). A thread of its own
 * writes them (an ordered, bounded queue: a feed is live, so when Redis is
 * away for long the oldest events are dropped and counted).
 *
 * Following: a viewer (or a caption download) on an instance that does not
 * hold the feed gets a proxy: a session-shaped record outside the session
 * table, like feed.c's ended feeds, whose captions come from the list and
 * whose event ring a follower thread fills from the stream (XREAD). The
 * viewer connection (conn_viewer.c, the gateway's writer) reads a proxy exactly as it reads a local session.
 * Proxies without viewers go after PROXY_IDLE_S.
 *
 * Keys, for a feed NAME: sotto:feed:NAME:meta (hash: session, key, owner,
 * live), :live (the live session's id, expiring, refreshed while it runs),
 * :owner, :events (stream, about STREAM_MAXLEN long), :finals (list).
 * Locks: the proxy list is under srv->lock, a proxy's content under its own
 * lock; the publisher queue under its own mutex.
 */
#define _POSIX_C_SOURCE 200809L
#include "server.h"

#include "log.h"
#include "persist.h"

#include <hiredis/hiredis.h>
#include <libwebsockets.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define PUB_QUEUE_MAX 8192
#define STREAM_MAXLEN "2000"
#define FINALS_MAX 5000
#define LIVE_TTL_S 60
#define KEEP_S 86400         /* a feed's keys outlive its session by this much */
#define PROXY_MAX 256
#define PROXY_IDLE_S 30.0

typedef struct pub_cmd {
    int argc;
    char *argv[12];
    size_t len[12];
} pub_cmd;

typedef struct proxy_info {
    char last_id[64]; /* the newest stream entry read */
    char session[32]; /* the publishing session's id */
    double idle_since; /* no viewers since (0: has viewers) */
} proxy_info;

typedef struct srv_remote {
    srv *s;
    /* publisher */
    pthread_mutex_t lock;
    pthread_cond_t cv;
    pub_cmd *q[PUB_QUEUE_MAX];
    int head, n, stop;
    pthread_t pub, fol;
    int pub_started, fol_started;
    uint64_t dropped, written;
    /* the service thread's connection (claims, lookups) */
    redisContext *sync;
    double sync_down_until; /* no new attempt before (after a failed connect) */
    /* proxies: srv->lock */
    srv_session *proxies[PROXY_MAX];
    proxy_info info[PROXY_MAX];
    int n_proxies;
    uint64_t next_proxy_id;
} remote;


static redisContext *connect_redis(remote *r) {
    char why[256];
    return srv_persist_connect(r->s->persist, why, sizeof why); /* persist.c: the same Redis */
}

static void key_of(char *out, size_t n, const char *name, const char *what) {
    snprintf(out, n, "sotto:feed:%s:%s", name, what);
}

/* The service thread's connection, not retried for a second after it failed
 * (so that a Redis outage costs a lookup one connect timeout a second, not one
 * per request). */
static redisContext *sync_conn(remote *r) {
    if (r->sync) return r->sync;
    if (srv_now() < r->sync_down_until) return NULL;
    if (!(r->sync = connect_redis(r))) r->sync_down_until = srv_now() + 1.0;
    return r->sync;
}

static void sync_lost(remote *r) {
    redisFree(r->sync);
    r->sync = NULL;
}

/* ---- publishing --------------------------------------------------------------- */

static void push_cmd(remote *r, pub_cmd *c) {
    pthread_mutex_lock(&r->lock);
    if (r->n == PUB_QUEUE_MAX) { /* Redis away for long: the oldest goes */
        pub_cmd *old = r->q[r->head];
        for (int i = 0; i < old->argc; i++) free(old->argv[i]);
        free(old);
        r->head = (r->head + 1) % PUB_QUEUE_MAX;
        r->n--;
        r->dropped++;
    }
    r->q[(r->head + r->n) % PUB_QUEUE_MAX] = c;
    r->n++;
    pthread_cond_signal(&r->cv);
    pthread_mutex_unlock(&r->lock);
}

/* A command from NUL-terminated strings (args up to 12); arg k may be given
 * with an explicit length in lens[k] (else strlen). */
static void queue_cmd(remote *r, int argc, const char *const *argv, const size_t *lens) {
    pub_cmd *c = calloc(1, sizeof *c);
    if (!c) return;
    c->argc = argc;
    for (int i = 0; i < argc; i++) {
        size_t l = lens && lens[i] ? lens[i] : strlen(argv[i]);
        c->argv[i] = malloc(l + 1);
        if (!c->argv[i]) {
            for (int k = 0; k < i; k++) free(c->argv[k]);
            free(c);
            return;
        }
        memcpy(c->argv[i], argv[i], l);
        c->argv[i][l] = 0;
        c->len[i] = l;
    }
    push_cmd(r, c);
}

static void *pub_main(void *arg) {
    remote *r = arg;
    redisContext *c = NULL;
    int logged = 0;
    for (;;) {
        pthread_mutex_lock(&r->lock);
        while (!r->stop && r->n == 0) pthread_cond_wait(&r->cv, &r->lock);
        if (r->n == 0) {
            pthread_mutex_unlock(&r->lock);
            break;
        }
        pub_cmd *cmd = r->q[r->head];
        int stopping = r->stop;
        pthread_mutex_unlock(&r->lock);
        if (!c) c = connect_redis(r);
        redisReply *x = c ? redisCommandArgv(c, cmd->argc, (const char **)cmd->argv, cmd->len) : NULL;
        int ok = x != NULL;
        if (x && x->type == REDIS_REPLY_ERROR) SOTTO_WARN("redis: feed %s refused: %s", cmd->argv[0], x->str);
        freeReplyObject(x);
        if (!ok) {
            redisFree(c);
            c = NULL;
            if (!logged) SOTTO_WARN("redis: feed events wait (Redis unreachable); the oldest go after %d", PUB_QUEUE_MAX);
            logged = 1;
            if (stopping) { /* leaving: what is left is lost */
                pthread_mutex_lock(&r->lock);
                r->dropped += (uint64_t)r->n;
                pthread_mutex_unlock(&r->lock);
                break;
            }
            struct timespec ts = {0, 200 * 1000000L};
            nanosleep(&ts, NULL);
            continue; /* retry the same command */
        }
        logged = 0;
        pthread_mutex_lock(&r->lock);
        if (r->n && r->q[r->head] == cmd) { /* still ours (not dropped for overflow meanwhile) */
            r->head = (r->head + 1) % PUB_QUEUE_MAX;
            r->n--;
            r->written++;
            for (int i = 0; i < cmd->argc; i++) free(cmd->argv[i]);
            free(cmd);
        }
        pthread_mutex_unlock(&r->lock);
    }
    redisFree(c);
    return NULL;
}

/* The claim: one live session per name fleet-wide, names owned by the first
 * key (ARGV[1], "-1" without keys). A new session under a name starts a new
 * history (the stream and the list of the previous one are dropped). */
static const char k_claim[] =
    "local owner = redis.call('GET', KEYS[2]) "
    "if ARGV[1] ~= '-1' and owner and owner ~= ARGV[1] then return -2 end "
    "local live = redis.call('GET', KEYS[3]) "
    "if live and live ~= ARGV[2] then return -1 end "
    "if ARGV[1] ~= '-1' then redis.call('SET', KEYS[2], ARGV[1]) end "
    "redis.call('SET', KEYS[3], ARGV[2], 'EX', ARGV[5]) "
    "if redis.call('HGET', KEYS[1], 'session') ~= ARGV[2] then "
    "  redis.call('DEL', KEYS[4], KEYS[5]) "
    "  redis.call('XADD', KEYS[4], 'MAXLEN', '~', '" STREAM_MAXLEN "', '*', 'e', "
    "    '{\"type\":\"feed_start\",\"session\":\"' .. ARGV[2] .. '\"}') end "
    "redis.call('HSET', KEYS[1], 'session', ARGV[2], 'key', ARGV[3], 'owner', ARGV[1], 'live', '1') "
    "for i = 1, 5 do redis.call('EXPIRE', KEYS[i], ARGV[4]) end "
    "redis.call('EXPIRE', KEYS[3], ARGV[5]) "
    "return 0";

int srv_feed_remote_claim(srv *s, srv_session *ss, const char *name) {
    remote *r = s->remote;
    if (!r || !s->persist) return 1;
    if (!sync_conn(r)) return 1;
    char k[5][160], owner[16], keep[16], ttl[16];
    const char *what[5] = {"meta", "owner", "live", "events", "finals"};
    for (int i = 0; i < 5; i++) key_of(k[i], sizeof k[i], name, what[i]);
    snprintf(owner, sizeof owner, "%d", ss->owner);
    snprintf(keep, sizeof keep, "%d", KEEP_S);
    snprintf(ttl, sizeof ttl, "%d", LIVE_TTL_S);
    const char *argv[] = {"EVAL", k_claim, "5", k[0], k[1], k[2], k[3], k[4], owner, ss->id_str, ss->feed_key,
                          keep, ttl};
    redisReply *x = redisCommandArgv(r->sync, 13, argv, NULL);
    if (!x) {
        redisFree(r->sync);
        r->sync = NULL;
        return 1;
    }
    int rc = x->type == REDIS_REPLY_INTEGER ? (int)x->integer : 1;
    if (x->type == REDIS_REPLY_ERROR) SOTTO_WARN("redis: feed claim refused: %s", x->str);
    freeReplyObject(x);
    return rc;
}

void srv_feed_remote_publish_locked(srv *s, srv_session *ss, const char *json, size_t len, const cJSON *ev,
                                    int is_final, int is_done) {
    remote *r = s->remote;
    /* proxies do not republish; a session restored elsewhere no longer speaks for its feed */
    if (!r || !s->persist || !ss->feed[0] || !ss->srv || ss->superseded) return;
    char ke[160];
    key_of(ke, sizeof ke, ss->feed, "events");
    const char *xa[] = {"XADD", ke, "MAXLEN", "~", STREAM_MAXLEN, "*", "e", json};
    size_t xl[] = {0, 0, 0, 0, 0, 0, 0, len};
    queue_cmd(r, 8, xa, xl);
    if (is_final) {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(ev, "text");
        if (cJSON_IsString(t) && t->valuestring[strspn(t->valuestring, " ")]) {
            cJSON *f = cJSON_CreateObject();
            const char *fields[] = {"utterance", "text", "start", "end"};
            for (int i = 0; f && i < 4; i++) {
                const cJSON *v = cJSON_GetObjectItemCaseSensitive(ev, fields[i]);
                if (v) cJSON_AddItemToObject(f, fields[i], cJSON_Duplicate(v, 1));
            }
            char *fj = f ? cJSON_PrintUnformatted(f) : NULL;
            cJSON_Delete(f);
            if (fj) {
                char kf[160], lo[16];
                key_of(kf, sizeof kf, ss->feed, "finals");
                snprintf(lo, sizeof lo, "-%d", FINALS_MAX);
                const char *rp[] = {"RPUSH", kf, fj};
                queue_cmd(r, 3, rp, NULL);
                const char *lt[] = {"LTRIM", kf, lo, "-1"};
                queue_cmd(r, 4, lt, NULL);
                free(fj);
            }
        }
    }
    if (is_done) {
        char km[160], kl[160];
        key_of(km, sizeof km, ss->feed, "meta");
        key_of(kl, sizeof kl, ss->feed, "live");
        const char *hs[] = {"HSET", km, "live", "0"};
        queue_cmd(r, 4, hs, NULL);
        const char *dl[] = {"DEL", kl};
        queue_cmd(r, 2, dl, NULL);
    }
}

void srv_feed_remote_refresh(srv *s, srv_session *ss) {
    remote *r = s->remote;
    if (!r || !s->persist || !ss->feed[0] || !ss->srv) return;
    char kl[160], ttl[16];
    key_of(kl, sizeof kl, ss->feed, "live");
    snprintf(ttl, sizeof ttl, "%d", LIVE_TTL_S);
    const char *a[] = {"SET", kl, ss->id_str, "EX", ttl};
    queue_cmd(r, 5, a, NULL);
}

/* ---- following ---------------------------------------------------------------- */

/* meta, the finals, the newest stream id: at once, so that nothing falls between */
static const char k_fetch[] =
    "local m = redis.call('HGETALL', KEYS[1]) "
    "if #m == 0 then return false end "
    "local f = redis.call('LRANGE', KEYS[2], 0, -1) "
    "local last = redis.call('XREVRANGE', KEYS[3], '+', '-', 'COUNT', 1) "
    "local id = '0-0' "
    "if #last > 0 then id = last[1][1] end "
    "return {m, f, id}";

static const char *hget(const redisReply *m, const char *field) {
    for (size_t i = 0; i + 1 < m->elements; i += 2)
        if (m->element[i]->type == REDIS_REPLY_STRING && !strcmp(m->element[i]->str, field) &&
            m->element[i + 1]->type == REDIS_REPLY_STRING)
            return m->element[i + 1]->str;
    return NULL;
}

static void proxy_free_captions_locked(srv_session *p) {
    for (int i = 0; i < p->n_captions; i++) free(p->captions[i].text);
    p->n_captions = 0;
}

/* One stream entry into proxy p (proxy lock held). */
static void proxy_event_locked(srv *s, srv_session *p, proxy_info *info, const char *json, size_t len) {
    cJSON *ev = cJSON_ParseWithLength(json, len);
    const cJSON *t = ev ? cJSON_GetObjectItemCaseSensitive(ev, "type") : NULL;
    if (!cJSON_IsString(t)) {
        cJSON_Delete(ev);
        return;
    }
    if (!strcmp(t->valuestring, "feed_start")) { /* another session under this name */
        const cJSON *sid = cJSON_GetObjectItemCaseSensitive(ev, "session");
        if (cJSON_IsString(sid) && strcmp(sid->valuestring, info->session)) {
            snprintf(info->session, sizeof info->session, "%s", sid->valuestring);
            proxy_free_captions_locked(p);
            p->state = SESS_RUNNING;
        }
        cJSON_Delete(ev);
        return;
    }
    int done = !strcmp(t->valuestring, "done");
    cJSON_DeleteItemFromObjectCaseSensitive(ev, "seq"); /* the proxy numbers its own */
    srv_session_emit_locked(s, p, ev);
    p->sent_upto = p->next_seq - 1; /* no speaker connection reads a proxy */
    if (done) p->state = SESS_DONE;
}

srv_session *srv_feed_remote_find(srv *s, const char *name) {
    remote *r = s->remote;
    if (!r || !s->persist) return NULL;
    pthread_mutex_lock(&s->lock);
    for (int i = 0; i < r->n_proxies; i++)
        if (!strcmp(r->proxies[i]->feed, name)) {
            srv_session *p = r->proxies[i];
            p->refs++;
            pthread_mutex_unlock(&s->lock);
            return p;
        }
    int full = r->n_proxies == PROXY_MAX;
    pthread_mutex_unlock(&s->lock);
    if (full) return NULL;
    if (!sync_conn(r)) return NULL;
    char km[160], kf[160], ke[160];
    key_of(km, sizeof km, name, "meta");
    key_of(kf, sizeof kf, name, "finals");
    key_of(ke, sizeof ke, name, "events");
    const char *argv[] = {"EVAL", k_fetch, "3", km, kf, ke};
    redisReply *x = redisCommandArgv(r->sync, 6, argv, NULL);
    if (!x) {
        redisFree(r->sync);
        r->sync = NULL;
        return NULL;
    }
    if (x->type != REDIS_REPLY_ARRAY || x->elements != 3 || x->element[0]->type != REDIS_REPLY_ARRAY ||
        x->element[1]->type != REDIS_REPLY_ARRAY || x->element[2]->type != REDIS_REPLY_STRING) {
        freeReplyObject(x);
        return NULL; /* no such feed */
    }
    const redisReply *m = x->element[0], *f = x->element[1];
    srv_session *p = calloc(1, sizeof *p);
    if (!p) {
        freeReplyObject(x);
        return NULL;
    }
    pthread_mutex_init(&p->lock, NULL);
    p->refs = 2; /* the list's and the caller's */
    p->next_seq = p->first_kept = 1;
    p->owner = hget(m, "owner") ? atoi(hget(m, "owner")) : -1;
    const char *live = hget(m, "live");
    p->state = live && !strcmp(live, "1") ? SESS_RUNNING : SESS_DONE;
    snprintf(p->feed, sizeof p->feed, "%s", name);
    snprintf(p->feed_key, sizeof p->feed_key, "%s", hget(m, "key") ? hget(m, "key") : "");
    for (size_t i = 0; i < f->elements; i++) {
        if (f->element[i]->type != REDIS_REPLY_STRING) continue;
        cJSON *e = cJSON_ParseWithLength(f->element[i]->str, f->element[i]->len);
        if (e) srv_feed_add_final_json(p, e);
        cJSON_Delete(e);
    }
    proxy_info info = {{0}, {0}, 0};
    snprintf(info.last_id, sizeof info.last_id, "%s", x->element[2]->str);
    snprintf(info.session, sizeof info.session, "%s", hget(m, "session") ? hget(m, "session") : "");
    freeReplyObject(x);
    pthread_mutex_lock(&s->lock);
    p->id = ++r->next_proxy_id + 1000000000ULL; /* a viewer's `feed.session`: a new number, a new session */
    for (int i = 0; i < r->n_proxies; i++) /* another thread made one meanwhile: use it */
        if (!strcmp(r->proxies[i]->feed, name)) {
            srv_session *q = r->proxies[i];
            q->refs++;
            pthread_mutex_unlock(&s->lock);
            p->refs = 1;
            srv_session_unref(s, p);
            return q;
        }
    if (r->n_proxies == PROXY_MAX) {
        pthread_mutex_unlock(&s->lock);
        p->refs = 1;
        srv_session_unref(s, p);
        return NULL;
    }
    info.idle_since = srv_now();
    r->info[r->n_proxies] = info;
    r->proxies[r->n_proxies++] = p;
    pthread_mutex_unlock(&s->lock);
    return p;
}

static void *fol_main(void *arg) {
    remote *r = arg;
    srv *s = r->s;
    redisContext *c = NULL;
    while (!atomic_load(&s->stop)) {
        /* which streams, from where; proxies idle too long go */
        srv_session *ps[PROXY_MAX], *gone[PROXY_MAX];
        char ids[PROXY_MAX][64];
        int n = 0, ng = 0;
        double now = srv_now();
        pthread_mutex_lock(&s->lock);
        for (int i = 0; i < r->n_proxies;) {
            srv_session *p = r->proxies[i];
            pthread_mutex_lock(&p->lock);
            int viewers = p->n_viewers;
            pthread_mutex_unlock(&p->lock);
            if (viewers) r->info[i].idle_since = 0;
            else if (!r->info[i].idle_since) r->info[i].idle_since = now;
            if (!viewers && now - r->info[i].idle_since > PROXY_IDLE_S) {
                gone[ng++] = p;
                r->proxies[i] = r->proxies[--r->n_proxies];
                r->info[i] = r->info[r->n_proxies];
                continue;
            }
            p->refs++;
            ps[n] = p;
            snprintf(ids[n], sizeof ids[n], "%s", r->info[i].last_id);
            n++;
            i++;
        }
        pthread_mutex_unlock(&s->lock);
        for (int i = 0; i < ng; i++) srv_session_unref(s, gone[i]);
        if (n == 0) {
            struct timespec ts = {0, 100 * 1000000L};
            nanosleep(&ts, NULL);
            continue;
        }
        if (!c) c = connect_redis(r);
        redisReply *x = NULL;
        if (c) {
            const char *argv[6 + 2 * PROXY_MAX];
            char keys[PROXY_MAX][160];
            int a = 0;
            argv[a++] = "XREAD";
            argv[a++] = "COUNT";
            argv[a++] = "256";
            argv[a++] = "BLOCK";
            argv[a++] = "200";
            argv[a++] = "STREAMS";
            for (int i = 0; i < n; i++) {
                key_of(keys[i], sizeof keys[i], ps[i]->feed, "events");
                argv[a++] = keys[i];
            }
            for (int i = 0; i < n; i++) argv[a++] = ids[i];
            x = redisCommandArgv(c, a, argv, NULL);
            if (!x) {
                redisFree(c);
                c = NULL;
            }
        }
        if (x && x->type == REDIS_REPLY_ARRAY) {
            for (size_t si = 0; si < x->elements; si++) {
                const redisReply *st = x->element[si];
                if (st->type != REDIS_REPLY_ARRAY || st->elements != 2) continue;
                const char *key = st->element[0]->str;
                int k = -1;
                for (int i = 0; i < n && k < 0; i++) {
                    char kk[160];
                    key_of(kk, sizeof kk, ps[i]->feed, "events");
                    if (!strcmp(kk, key)) k = i;
                }
                if (k < 0) continue;
                const redisReply *entries = st->element[1];
                char last[64] = "";
                proxy_info tmp = {{0}, {0}, 0}; /* srv->lock before a session's lock, never inside it */
                pthread_mutex_lock(&s->lock);
                for (int i = 0; i < r->n_proxies; i++)
                    if (r->proxies[i] == ps[k]) tmp = r->info[i];
                pthread_mutex_unlock(&s->lock);
                pthread_mutex_lock(&ps[k]->lock);
                for (size_t e = 0; e < entries->elements; e++) {
                    const redisReply *en = entries->element[e];
                    if (en->type != REDIS_REPLY_ARRAY || en->elements != 2) continue;
                    snprintf(last, sizeof last, "%s", en->element[0]->str);
                    const redisReply *fv = en->element[1];
                    for (size_t j = 0; j + 1 < fv->elements; j += 2)
                        if (!strcmp(fv->element[j]->str, "e"))
                            proxy_event_locked(s, ps[k], &tmp, fv->element[j + 1]->str, fv->element[j + 1]->len);
                }
                pthread_mutex_unlock(&ps[k]->lock);
                pthread_mutex_lock(&s->lock);
                for (int i = 0; i < r->n_proxies; i++)
                    if (r->proxies[i] == ps[k]) {
                        snprintf(tmp.last_id, sizeof tmp.last_id, "%s", last[0] ? last : r->info[i].last_id);
                        tmp.idle_since = r->info[i].idle_since;
                        r->info[i] = tmp;
                    }
                pthread_mutex_unlock(&s->lock);
            }
        } else if (!c) {
            struct timespec ts = {0, 200 * 1000000L};
            nanosleep(&ts, NULL);
        }
        freeReplyObject(x);
        for (int i = 0; i < n; i++) srv_session_unref(s, ps[i]);
    }
    redisFree(c);
    return NULL;
}

void srv_feed_remote_wake(srv *s) {
    remote *r = s->remote;
    if (!r) return;
    pthread_mutex_lock(&s->lock);
    for (int i = 0; i < r->n_proxies; i++) {
        srv_session *p = r->proxies[i];
        pthread_mutex_lock(&p->lock);
        if (p->n_viewers && (p->next_seq - 1 > p->viewers_woken_seq || p->state == SESS_DONE)) {
            p->viewers_woken_seq = p->next_seq - 1;
            for (int v = 0; v < p->n_viewers; v++) lws_callback_on_writable(p->viewers[v]);
        }
        pthread_mutex_unlock(&p->lock);
    }
    pthread_mutex_unlock(&s->lock);
}

/* ---- client tokens --------------------------------------------------------------- */

int srv_fleet_token_put(srv *s, const char *value, int ident, double ttl_s) {
    remote *r = s->remote;
    if (!r || !s->persist || !sync_conn(r)) return -1;
    char key[96], id[16], ttl[24];
    snprintf(key, sizeof key, "sotto:token:%s", value);
    snprintf(id, sizeof id, "%d", ident);
    snprintf(ttl, sizeof ttl, "%lld", (long long)(ttl_s * 1000));
    const char *argv[] = {"SET", key, id, "PX", ttl};
    redisReply *x = redisCommandArgv(r->sync, 5, argv, NULL);
    if (!x) sync_lost(r);
    int ok = x && x->type != REDIS_REPLY_ERROR;
    freeReplyObject(x);
    return ok ? 0 : -1;
}

int srv_fleet_token_get(srv *s, const char *value, int *ident, double *ttl_left) {
    remote *r = s->remote;
    if (!r || !s->persist || !sync_conn(r)) return -1;
    char key[96];
    snprintf(key, sizeof key, "sotto:token:%s", value);
    const char *argv[] = {"EVAL", "return {redis.call('GET', KEYS[1]), redis.call('PTTL', KEYS[1])}", "1", key};
    redisReply *x = redisCommandArgv(r->sync, 4, argv, NULL);
    if (!x) {
        sync_lost(r);
        return -1;
    }
    int found = -1;
    if (x->type == REDIS_REPLY_ARRAY && x->elements == 2 && x->element[0]->type == REDIS_REPLY_STRING &&
        x->element[1]->type == REDIS_REPLY_INTEGER && x->element[1]->integer > 0) {
        *ident = atoi(x->element[0]->str);
        *ttl_left = x->element[1]->integer / 1000.0;
        found = 0;
    }
    freeReplyObject(x);
    return found;
}

/* ---- lifetime ------------------------------------------------------------------- */

int srv_feed_remote_start(srv *s, char *why, size_t why_sz) {
    remote *r = calloc(1, sizeof *r);
    if (!r) return snprintf(why, why_sz, "out of memory"), -1;
    r->s = s; /* connects through s->persist (created first) */
    pthread_mutex_init(&r->lock, NULL);
    pthread_cond_init(&r->cv, NULL);
    s->remote = r;
    if (pthread_create(&r->pub, NULL, pub_main, r) == 0) r->pub_started = 1;
    if (pthread_create(&r->fol, NULL, fol_main, r) == 0) r->fol_started = 1;
    if (!r->pub_started || !r->fol_started) {
        snprintf(why, why_sz, "cannot start the feed threads");
        srv_feed_remote_stop(s);
        return -1;
    }
    return 0;
}

void srv_feed_remote_stop(srv *s) {
    remote *r = s->remote;
    if (!r) return;
    pthread_mutex_lock(&r->lock);
    r->stop = 1;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->lock);
    if (r->pub_started) pthread_join(r->pub, NULL);
    if (r->fol_started) pthread_join(r->fol, NULL); /* it ends with s->stop */
    for (int i = 0; i < r->n; i++) {
        pub_cmd *c = r->q[(r->head + i) % PUB_QUEUE_MAX];
        for (int k = 0; k < c->argc; k++) free(c->argv[k]);
        free(c);
    }
    for (int i = 0; i < r->n_proxies; i++) srv_session_unref(s, r->proxies[i]);
    redisFree(r->sync);
    pthread_mutex_destroy(&r->lock);
    pthread_cond_destroy(&r->cv);
    s->remote = NULL;
    free(r);
}

void srv_feed_remote_stats(srv *s, uint64_t *written, uint64_t *dropped) {
    remote *r = s->remote;
    *written = *dropped = 0;
    if (!r) return;
    pthread_mutex_lock(&r->lock);
    *written = r->written;
    *dropped = r->dropped;
    pthread_mutex_unlock(&r->lock);
}
