/* persist.h - session checkpoints in Redis (--redis URL), so that a resume
 * can land on any sotto-server instance of a fleet (issue 16).
 *
 * A checkpoint is one JSON document per session (server/checkpoint.c says
 * what it holds), stored as the string key "sotto:session:<id>" with an
 * expiry. Writes never block the caller: srv_persist_put() hands the
 * document to a writer thread, which keeps only the newest document per
 * session while Redis is unreachable, reconnects with a back-off, and
 * counts what it could not write. Reads (a resume of a session this
 * instance does not hold) are synchronous with a short timeout.
 *
 * Ownership: the persist object owns its thread, its connections and the
 * documents queued; callers keep what they pass (documents are copied) and
 * free what srv_persist_get() returns. Thread-safe.
 */
#ifndef SOTTO_SERVER_PERSIST_H
#define SOTTO_SERVER_PERSIST_H

#include <stddef.h>
#include <stdint.h>

typedef struct srv_persist srv_persist;

typedef struct srv_persist_stats {
    uint64_t writes;        /* documents written */
    uint64_t write_errors;  /* writes that failed (each retried with the newest document) */
    uint64_t replaced;      /* queued documents replaced by a newer one before being written */
    uint64_t refused;       /* writes refused: another instance restored the session since */
    uint64_t reads, read_errors;
    uint64_t write_us;      /* time the writer spent in successful writes (round trips) */
    int connected;          /* the writer's connection is up */
    int queued;             /* documents waiting */
} srv_persist_stats;

/* A session this instance holds without a connection, and its epoch. */
typedef struct srv_persist_watch {
    char id[48];
    uint64_t epoch;
} srv_persist_watch;

/* Called on the writer thread, with no lock of the persist held:
 * written: a document was stored (tag: what srv_persist_put was given);
 * reconnected: Redis is reachable again after an outage (it may have lost
 * everything: a restart without persistence), so every live session should
 * queue its checkpoint again;
 * detached: fills out[] (at most max) with the sessions held here without a
 * connection; once a second while the writer is idle, it compares each
 * one's epoch with the stored checkpoint's;
 * superseded: session id was restored on another instance (a write of it
 * was refused, or the stored epoch is newer than its own): this instance
 * should let go of it. */
typedef struct srv_persist_hooks {
    void (*written)(void *user, const char *id, uint64_t epoch, uint64_t tag);
    void (*reconnected)(void *user);
    int (*detached)(void *user, srv_persist_watch *out, int max);
    void (*superseded)(void *user, const char *id);
    void *user;
} srv_persist_hooks;

/* url: redis://HOST[:PORT][/DB] or unix:PATH. ttl_s: each document's expiry.
 * Returns NULL with a message in why for a malformed URL; an unreachable
 * server is not an error (the writer keeps trying). hooks may be NULL. */
srv_persist *srv_persist_create(const char *url, double ttl_s, const srv_persist_hooks *hooks, char *why,
                                size_t why_sz);
/* No hook runs after this returns (before the hooks' user goes away). */
void srv_persist_quiesce(srv_persist *p);
void srv_persist_free(srv_persist *p); /* accepts NULL; writes what is queued if it can (1 s) */

/* Queues doc (copied) as the checkpoint of session id; replaces one queued
 * for it. doc is a JSON object whose "epoch" is epoch: it is written only
 * if the stored one's epoch is not newer (each restore of a session on
 * another instance increments it, so the instance that held it before
 * cannot overwrite it). */
int srv_persist_put(srv_persist *p, const char *id, uint64_t epoch, uint64_t tag, const char *doc, size_t len);
/* Queues the deletion of session id's checkpoint (same epoch rule). A
 * session restored here from another instance (epoch > 0) leaves a
 * tombstone, {"v":1,"epoch":E,"finished":true}, for the checkpoint's TTL
 * instead: the instance that held it before sees the newer epoch and lets
 * go of its detached copy even when the session ended here within a second
 * of its restore. A resume finds no session in a tombstone. */
int srv_persist_del(srv_persist *p, const char *id, uint64_t epoch);
/* The checkpoint of session id: malloc'd, NUL-terminated, or NULL with
 * *found 0 (none) or -1 (Redis unreachable: why says so). */
char *srv_persist_get(srv_persist *p, const char *id, int *found, char *why, size_t why_sz);
/* A new connection to p's Redis (timeouts set, database selected), or NULL
 * with why set. The caller owns it (redisFree); for the other parts of the
 * server that talk to the same Redis (fleet.c). */
struct redisContext *srv_persist_connect(srv_persist *p, char *why, size_t why_sz);
/* 1 while the writer's connection is up (it PINGs once a second when idle): /readyz. */
int srv_persist_connected(srv_persist *p);
void srv_persist_get_stats(srv_persist *p, srv_persist_stats *st);

#endif
