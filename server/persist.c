/* persist.c - session checkpoints in Redis through hiredis (see persist.h). */
#define _POSIX_C_SOURCE 200809L
#include "persist.h"

#include "log.h"

#include <hiredis/hiredis.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define QUEUE_MAX 4096      /* sessions with a checkpoint waiting (one document each) */
#define ID_MAX 48
#define CONNECT_TIMEOUT_MS 300
#define IO_TIMEOUT_MS 500
#define BACKOFF_MAX_MS 2000
#define KEY_PREFIX "sotto:session:"

typedef struct item {
    char id[ID_MAX];
    char *doc; /* NULL: delete */
    size_t len;
    uint64_t epoch, tag;
} item;

/* SET (or, when ARGV[1] is empty, DEL at epoch 0 and a tombstone after a
 * restore: srv_persist_del) unless the stored document has a newer epoch: a
 * session restored elsewhere is not overwritten by the instance that held
 * it before. Returns 1 if written, 0 if refused. */
static const char k_put_script[] =
    "local c = redis.call('GET', KEYS[1]) "
    "if c then local ok, d = pcall(cjson.decode, c) "
    "  if ok and type(d) == 'table' and tonumber(d.epoch) and tonumber(d.epoch) > tonumber(ARGV[2]) then return 0 end end "
    "if ARGV[1] == '' and tonumber(ARGV[2]) == 0 then redis.call('DEL', KEYS[1]) "
    "elseif ARGV[1] == '' then redis.call('SET', KEYS[1], "
    "  '{\"v\":1,\"epoch\":' .. ARGV[2] .. ',\"finished\":true}', 'EX', ARGV[3]) "
    "else redis.call('SET', KEYS[1], ARGV[1], 'EX', ARGV[3]) end "
    "return 1";

/* The epoch of a stored checkpoint, or -1 when there is none (or it is not one). */
static const char k_epoch_script[] =
    "local c = redis.call('GET', KEYS[1]) "
    "if not c then return -1 end "
    "local ok, d = pcall(cjson.decode, c) "
    "if ok and type(d) == 'table' and tonumber(d.epoch) then return tonumber(d.epoch) end "
    "return -1";

#define WATCH_MAX 64 /* detached sessions checked per idle second */

struct srv_persist {
    char host[256];
    int port;
    char unix_path[256];
    int db;
    long ttl_s;

    pthread_mutex_t lock;
    pthread_cond_t cv;
    item q[QUEUE_MAX];
    int n;
    int stop;
    pthread_t writer;
    int writer_started;
    srv_persist_stats st;

    pthread_mutex_t hook_lock; /* held while a hook runs; quiesce clears them under it */
    srv_persist_hooks hooks;
    int ever_connected, outage;

    pthread_mutex_t read_lock; /* the reader connection (resumes) */
    redisContext *rc;
};

static int parse_url(srv_persist *p, const char *url, char *why, size_t why_sz) {
    p->port = 6379;
    if (!strncmp(url, "unix:", 5)) {
        if (!url[5] || strlen(url + 5) >= sizeof p->unix_path) goto bad;
        snprintf(p->unix_path, sizeof p->unix_path, "%s", url + 5);
        return 0;
    }
    if (strncmp(url, "redis://", 8)) goto bad;
    const char *h = url + 8, *end = h + strcspn(h, ":/");
    if (end == h || (size_t)(end - h) >= sizeof p->host) goto bad;
    memcpy(p->host, h, (size_t)(end - h));
    p->host[end - h] = 0;
    if (*end == ':') {
        char *e;
        long port = strtol(end + 1, &e, 10);
        if (e == end + 1 || port < 1 || port > 65535) goto bad;
        p->port = (int)port;
        end = e;
    }
    if (*end == '/') {
        char *e;
        long db = strtol(end + 1, &e, 10);
        if (e == end + 1 || db < 0 || db > 1000 || *e) goto bad;
        p->db = (int)db;
        end = e;
    }
    if (*end) goto bad;
    return 0;
bad:
    snprintf(why, why_sz, "--redis '%.200s': expected redis://HOST[:PORT][/DB] or unix:PATH", url);
    return -1;
}

redisContext *srv_persist_connect(srv_persist *p, char *why, size_t why_sz) {
    struct timeval ct = {0, CONNECT_TIMEOUT_MS * 1000}, io = {0, IO_TIMEOUT_MS * 1000};
    redisContext *c = p->unix_path[0] ? redisConnectUnixWithTimeout(p->unix_path, ct)
                                      : redisConnectWithTimeout(p->host, p->port, ct);
    if (!c || c->err) {
        snprintf(why, why_sz, "%s", c ? c->errstr : "out of memory");
        redisFree(c);
        return NULL;
    }
    redisSetTimeout(c, io);
    if (p->db) {
        redisReply *r = redisCommand(c, "SELECT %d", p->db);
        int ok = r && r->type != REDIS_REPLY_ERROR;
        if (!ok) snprintf(why, why_sz, "SELECT %d: %s", p->db, r ? r->str : c->errstr);
        freeReplyObject(r);
        if (!ok) {
            redisFree(c);
            return NULL;
        }
    }
    return c;
}

static int find_locked(srv_persist *p, const char *id) {
    for (int i = 0; i < p->n; i++)
        if (!strcmp(p->q[i].id, id)) return i;
    return -1;
}

/* Queues it (takes doc), replacing a queued item of the same session. */
static int enqueue(srv_persist *p, const char *id, uint64_t epoch, uint64_t tag, char *doc, size_t len) {
    if (strlen(id) >= ID_MAX) {
        free(doc);
        return -1;
    }
    pthread_mutex_lock(&p->lock);
    int i = find_locked(p, id);
    if (i >= 0) {
        free(p->q[i].doc);
        p->st.replaced++;
    } else if (p->n == QUEUE_MAX) { /* Redis away for long with very many sessions: drop the oldest */
        free(p->q[0].doc);
        memmove(p->q, p->q + 1, sizeof(item) * (QUEUE_MAX - 1));
        p->n--;
        p->st.write_errors++;
        i = p->n++;
    } else {
        i = p->n++;
    }
    snprintf(p->q[i].id, ID_MAX, "%s", id);
    p->q[i].doc = doc;
    p->q[i].len = len;
    p->q[i].epoch = epoch;
    p->q[i].tag = tag;
    p->st.queued = p->n;
    pthread_cond_signal(&p->cv);
    pthread_mutex_unlock(&p->lock);
    return 0;
}

static void sleep_ms(srv_persist *p, int ms) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += ms / 1000;
    ts.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
    pthread_mutex_lock(&p->lock);
    if (!p->stop) pthread_cond_timedwait(&p->cv, &p->lock, &ts);
    pthread_mutex_unlock(&p->lock);
}

/* The writer's connection, (re)connected if needed; NULL while Redis is
 * unreachable. Logs the outage once and its end, and runs the reconnected
 * hook when a connection comes back after one was lost. */
static redisContext *writer_conn(srv_persist *p, redisContext **c) {
    if (*c) return *c;
    char why[256] = "";
    *c = srv_persist_connect(p, why, sizeof why);
    pthread_mutex_lock(&p->lock);
    p->st.connected = *c != NULL;
    int was_out = p->outage, again = p->ever_connected;
    if (*c) p->ever_connected = 1, p->outage = 0;
    else p->outage = 1;
    pthread_mutex_unlock(&p->lock);
    if (!*c) {
        if (!was_out)
            SOTTO_WARN("redis: unreachable (%s); sessions go on, their checkpoints wait and are retried "
                       "(until then a resume on another instance finds only older ones)", why);
        return NULL;
    }
    if (again) {
        SOTTO_INFO("redis: reachable again; every session's checkpoint is written again");
        pthread_mutex_lock(&p->hook_lock);
        if (p->hooks.reconnected) p->hooks.reconnected(p->hooks.user);
        pthread_mutex_unlock(&p->hook_lock);
    }
    return *c;
}

/* The connection broke (no reply): drop it; the next use reconnects. */
static void writer_lost(srv_persist *p, redisContext **c) {
    redisFree(*c);
    *c = NULL;
    pthread_mutex_lock(&p->lock);
    p->st.connected = 0;
    pthread_mutex_unlock(&p->lock);
}

static void hook_superseded(srv_persist *p, const char *id) {
    pthread_mutex_lock(&p->hook_lock);
    if (p->hooks.superseded) p->hooks.superseded(p->hooks.user, id);
    pthread_mutex_unlock(&p->hook_lock);
}

/* Idle work: asks the server which sessions sit detached here, and tells it
 * about each whose stored checkpoint has a newer epoch (restored on another
 * instance since), so that it lets go of them now instead of at the end of
 * their grace period. */
static void check_detached(srv_persist *p, redisContext **c) {
    srv_persist_watch w[WATCH_MAX];
    int n = 0;
    pthread_mutex_lock(&p->hook_lock);
    if (p->hooks.detached && p->hooks.superseded) n = p->hooks.detached(p->hooks.user, w, WATCH_MAX);
    pthread_mutex_unlock(&p->hook_lock);
    for (int i = 0; i < n && *c; i++) {
        char key[ID_MAX + sizeof KEY_PREFIX];
        snprintf(key, sizeof key, KEY_PREFIX "%.47s", w[i].id);
        const char *argv[] = {"EVAL", k_epoch_script, "1", key};
        size_t argl[] = {4, sizeof k_epoch_script - 1, 1, strlen(key)};
        redisReply *r = redisCommandArgv(*c, 4, argv, argl);
        if (!r) {
            writer_lost(p, c);
            break;
        }
        if (r->type == REDIS_REPLY_INTEGER && r->integer >= 0 && (uint64_t)r->integer > w[i].epoch)
            hook_superseded(p, w[i].id);
        freeReplyObject(r);
    }
}

static void *writer_main(void *arg) {
    srv_persist *p = arg;
    redisContext *c = NULL;
    int backoff = 100;
    for (;;) {
        pthread_mutex_lock(&p->lock);
        if (!p->stop && p->n == 0) { /* idle: PING once a second, so /readyz knows */
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_sec += 1;
            pthread_cond_timedwait(&p->cv, &p->lock, &ts);
        }
        if (p->n == 0) {
            int stopping = p->stop;
            pthread_mutex_unlock(&p->lock);
            if (stopping) break;
            if (writer_conn(p, &c)) {
                redisReply *r = redisCommand(c, "PING");
                if (!r) writer_lost(p, &c);
                freeReplyObject(r);
                if (c) check_detached(p, &c);
            }
            continue;
        }
        item it = p->q[0];
        memmove(p->q, p->q + 1, sizeof(item) * (size_t)(p->n - 1));
        p->n--;
        p->st.queued = p->n;
        int stopping = p->stop;
        pthread_mutex_unlock(&p->lock);

        int ok = 0, refused = 0;
        struct timespec w0, w1;
        clock_gettime(CLOCK_MONOTONIC, &w0);
        if (writer_conn(p, &c)) {
            char key[ID_MAX + sizeof KEY_PREFIX], ep[24], ttl[24];
            snprintf(key, sizeof key, KEY_PREFIX "%s", it.id);
            snprintf(ep, sizeof ep, "%llu", (unsigned long long)it.epoch);
            snprintf(ttl, sizeof ttl, "%ld", p->ttl_s);
            const char *argv[] = {"EVAL", k_put_script, "1", key, it.doc ? it.doc : "", ep, ttl};
            size_t argl[] = {4, sizeof k_put_script - 1, 1, strlen(key), it.doc ? it.len : 0, strlen(ep), strlen(ttl)};
            redisReply *r = redisCommandArgv(c, 7, argv, argl);
            ok = r && r->type != REDIS_REPLY_ERROR;
            refused = ok && r->type == REDIS_REPLY_INTEGER && r->integer == 0;
            if (r && !ok) SOTTO_WARN("redis: checkpoint of %s refused: %s", it.id, r->str);
            if (!r) writer_lost(p, &c);
            freeReplyObject(r);
        }
        clock_gettime(CLOCK_MONOTONIC, &w1);
        pthread_mutex_lock(&p->lock);
        if (ok) {
            p->st.write_us += (uint64_t)((w1.tv_sec - w0.tv_sec) * 1000000LL + (w1.tv_nsec - w0.tv_nsec) / 1000);
            p->st.writes += !refused;
            p->st.refused += refused;
        } else {
            p->st.write_errors++;
            if (find_locked(p, it.id) < 0 && !stopping) { /* no newer one queued: retry it first */
                memmove(p->q + 1, p->q, sizeof(item) * (size_t)p->n);
                p->q[0] = it;
                p->n++;
                p->st.queued = p->n;
                it.doc = NULL;
            }
        }
        pthread_mutex_unlock(&p->lock);
        if (ok && !refused && it.doc) {
            pthread_mutex_lock(&p->hook_lock);
            if (p->hooks.written) p->hooks.written(p->hooks.user, it.id, it.epoch, it.tag);
            pthread_mutex_unlock(&p->hook_lock);
        }
        if (refused && it.doc) hook_superseded(p, it.id); /* restored elsewhere since */
        free(it.doc); /* NULL when requeued */
        if (ok) {
            backoff = 100;
        } else if (!stopping) {
            sleep_ms(p, backoff);
            backoff = backoff * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : backoff * 2;
        }
    }
    redisFree(c);
    return NULL;
}

srv_persist *srv_persist_create(const char *url, double ttl_s, const srv_persist_hooks *hooks, char *why,
                                size_t why_sz) {
    srv_persist *p = calloc(1, sizeof *p);
    if (!p) {
        snprintf(why, why_sz, "out of memory");
        return NULL;
    }
    if (parse_url(p, url, why, why_sz)) {
        free(p);
        return NULL;
    }
    p->ttl_s = ttl_s < 1 ? 1 : (long)ttl_s;
    if (hooks) p->hooks = *hooks;
    pthread_mutex_init(&p->hook_lock, NULL);
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->cv, NULL);
    pthread_mutex_init(&p->read_lock, NULL);
    if (pthread_create(&p->writer, NULL, writer_main, p)) {
        snprintf(why, why_sz, "cannot start the checkpoint writer thread");
        srv_persist_free(p);
        return NULL;
    }
    p->writer_started = 1;
    return p;
}

void srv_persist_free(srv_persist *p) {
    if (!p) return;
    if (p->writer_started) {
        pthread_mutex_lock(&p->lock);
        p->stop = 1;
        pthread_cond_broadcast(&p->cv);
        pthread_mutex_unlock(&p->lock);
        pthread_join(p->writer, NULL);
    }
    for (int i = 0; i < p->n; i++) free(p->q[i].doc);
    redisFree(p->rc);
    pthread_mutex_destroy(&p->lock);
    pthread_cond_destroy(&p->cv);
    pthread_mutex_destroy(&p->read_lock);
    pthread_mutex_destroy(&p->hook_lock);
    free(p);
}

int srv_persist_put(srv_persist *p, const char *id, uint64_t epoch, uint64_t tag, const char *doc, size_t len) {
    char *copy = malloc(len + 1);
    if (!copy) return -1;
    memcpy(copy, doc, len);
    copy[len] = 0;
    return enqueue(p, id, epoch, tag, copy, len);
}

int srv_persist_del(srv_persist *p, const char *id, uint64_t epoch) { return enqueue(p, id, epoch, 0, NULL, 0); }

/* GET key (id) or PING (id NULL) on the reader connection (read_lock held); reconnects once. */
static redisReply *read_cmd(srv_persist *p, const char *id, char *why, size_t why_sz) {
    for (int attempt = 0; attempt < 2; attempt++) {
        if (!p->rc && !(p->rc = srv_persist_connect(p, why, why_sz))) return NULL;
        redisReply *r = id ? redisCommand(p->rc, "GET " KEY_PREFIX "%s", id) : redisCommand(p->rc, "PING");
        if (r) return r;
        snprintf(why, why_sz, "%s", p->rc->errstr);
        redisFree(p->rc);
        p->rc = NULL;
    }
    return NULL;
}

char *srv_persist_get(srv_persist *p, const char *id, int *found, char *why, size_t why_sz) {
    *found = 0;
    /* a checkpoint of it still queued here is the newest */
    pthread_mutex_lock(&p->lock);
    int i = find_locked(p, id);
    char *out = i >= 0 && p->q[i].doc ? strdup(p->q[i].doc) : NULL;
    int deleted = i >= 0 && !p->q[i].doc;
    pthread_mutex_unlock(&p->lock);
    if (out || deleted) {
        *found = out ? 1 : 0;
        return out;
    }
    pthread_mutex_lock(&p->read_lock);
    redisReply *r = read_cmd(p, id, why, why_sz);
    if (!r || r->type == REDIS_REPLY_ERROR) {
        if (r) snprintf(why, why_sz, "%s", r->str);
        *found = -1;
    } else if (r->type == REDIS_REPLY_STRING) {
        out = malloc(r->len + 1);
        if (out) {
            memcpy(out, r->str, r->len);
            out[r->len] = 0;
            *found = 1;
        }
    }
    freeReplyObject(r);
    pthread_mutex_unlock(&p->read_lock);
    pthread_mutex_lock(&p->lock);
    p->st.reads++;
    if (*found < 0) p->st.read_errors++;
    pthread_mutex_unlock(&p->lock);
    return out;
}

void srv_persist_quiesce(srv_persist *p) {
    pthread_mutex_lock(&p->hook_lock);
    memset(&p->hooks, 0, sizeof p->hooks);
    pthread_mutex_unlock(&p->hook_lock);
}

int srv_persist_connected(srv_persist *p) {
    pthread_mutex_lock(&p->lock);
    int ok = p->st.connected;
    pthread_mutex_unlock(&p->lock);
    return ok;
}

void srv_persist_get_stats(srv_persist *p, srv_persist_stats *st) {
    pthread_mutex_lock(&p->lock);
    *st = p->st;
    pthread_mutex_unlock(&p->lock);
}
