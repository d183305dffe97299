/* wakeup.c - what the service thread does when woken (lws_cancel_service from
 * any thread: new events, a state change, srv_wake, a signal): writeable
 * callbacks for the connections with something to send, checkpoints of
 * detached sessions, feed renewals, the drain on SIGTERM. */
#define _POSIX_C_SOURCE 200809L
#include "compat.h"
#include "server.h"

#include "log.h"

#include <ev.h>
#include <libwebsockets.h>
#include <stdlib.h>

/* SIGTERM with --redis: a running session is not finished here but moved:
 * checkpointed, its client told to `reconnect` (a resume through the load
 * balancer lands on another instance, which restores it), and closed.
 * Returns 0 if it cannot move (no checkpoints, not started). */
static int move_session(srv *s, srv_session *ss) {
    if (!s->persist) return 0;
    pthread_mutex_lock(&ss->lock);
    if (!ss->start_json || (ss->state != SESS_RUNNING && ss->state != SESS_LOADING)) {
        pthread_mutex_unlock(&ss->lock);
        return 0;
    }
    srv_checkpoint_maybe_locked(s, ss, 1);
    uint64_t units = srv_durable_units_locked(s, ss); /* Redis has it; the newer one follows */
    cJSON *e = cJSON_CreateObject();
    if (e) {
        cJSON_AddStringToObject(e, "type", "reconnect");
        cJSON_AddStringToObject(e, "reason", "draining");
        cJSON_AddStringToObject(e, "message", "this server is shutting down: resume the session "
                                             "(another instance continues it)");
        cJSON_AddNumberToObject(e, "durable", (double)units);
        srv_session_emit_locked(s, ss, e);
    }
    ss->state = SESS_DONE;
    ss->moved = 1;
    ss->closing = 1;
    pthread_mutex_unlock(&ss->lock);
    sotto_log(SOTTO_LOG_INFO, ss->id, "draining: moved (checkpointed at offset %llu, client told to reconnect)",
              (unsigned long long)units);
    return 1;
}

/* What a wake-up does for one session (srv->lock and its lock held): ask for a
 * writable callback if it has events to send or is closing, checkpoint it if it
 * is detached (or Redis came back), renew its feed record, wake its viewers.
 * Returns 1 while the session is busy (for the drain). */
static int wake_session_locked(srv *s, srv_session *ss, int refresh_feeds) {
    int pending = ss->sent_upto + 1 < ss->next_seq || ss->closing;
    if (ss->wsi && pending) lws_callback_on_writable(ss->wsi);
    /* live sessions checkpoint from their acks and passes; here: detached ones, and every
       one after a Redis outage (wake-ups come with every event: keep this cheap) */
    if (s->persist && (!ss->wsi || ss->ckpt_gen_seen != atomic_load(&s->ckpt_gen)))
        srv_checkpoint_maybe_locked(s, ss, 0);
    if (refresh_feeds && ss->feed[0] && ss->state >= SESS_LOADING && ss->state <= SESS_STOPPING)
        srv_feed_remote_refresh(s, ss);
    if (ss->n_viewers && (ss->next_seq - 1 > ss->viewers_woken_seq || ss->state == SESS_DONE)) {
        /* feed viewers: new events, or the end */
        ss->viewers_woken_seq = ss->next_seq - 1;
        for (int v = 0; v < ss->n_viewers; v++) lws_callback_on_writable(ss->viewers[v]);
    }
    /* a session is busy until it is done and its connection has written everything
       and closed */
    return ss->state == SESS_LOADING || ss->state == SESS_RUNNING || ss->state == SESS_STOPPING ||
           (ss->wsi && pending);
}

/* The service thread's wake-up (lws_cancel_service from any thread): connections
 * with something to send get a writeable callback, expired sessions go, a
 * draining server stops its sessions. Usually it
 * visits only the sessions that asked (srv_session_wake: new events, a state
 * change), so a wake-up costs the same with 10 or 10,000 idle sessions. It
 * visits (and reaps) every session after srv_wake, while draining, when live
 * feeds' records are due for renewal, and at least once a second (detached
 * sessions' grace, their checkpoints). */
void srv_service_wakeup(srv *s) {
    int draining = atomic_load(&s->draining);
    if (draining && s->drain_started == 0) s->drain_started = srv_now();
    double now = srv_now();
    int refresh_feeds = s->persist && now - s->feeds_refreshed > 20;
    if (refresh_feeds) s->feeds_refreshed = now;
    int all = atomic_exchange(&s->wake_all, 0) || draining || refresh_feeds ||
              now - s->scanned_all_at >= 1.0;
    if (all) srv_sessions_reap(s); /* detached sessions past their grace, --max-detached */
    srv_session *to_stop[256];
    int n_stop = 0, active = 0;
    pthread_mutex_lock(&s->lock);
    srv_session *list = srv_wake_list_take_locked(s); /* in the table: valid under srv->lock */
    if (all) { /* every session instead: the queued ones are unmarked */
        while (list) list = srv_wake_list_next_locked(s, list);
        s->scanned_all_at = now;
        list = s->sessions;
    }
    for (srv_session *ss = list, *next; ss; ss = next) {
        next = all ? ss->next : srv_wake_list_next_locked(s, ss);
        pthread_mutex_lock(&ss->lock);
        active += wake_session_locked(s, ss, refresh_feeds);
        if (draining && n_stop < 256 &&
            (ss->state == SESS_RUNNING || ss->state == SESS_LOADING ||
             (ss->state == SESS_NEW && ss->wsi && !ss->closing))) {
            ss->refs++;
            to_stop[n_stop++] = ss;
        }
        pthread_mutex_unlock(&ss->lock);
    }
    pthread_mutex_unlock(&s->lock);
    for (int i = 0; i < n_stop; i++) { /* SIGTERM: finish what was heard, then close */
        if (!move_session(s, to_stop[i])) srv_session_stop(s, to_stop[i], 1);
        srv_session_unref(s, to_stop[i]);
    }
    srv_feed_remote_wake(s);
    srv_batch_wakeup(s);
    active += srv_batch_busy(s);
    if (draining && (active == 0 || srv_now() - s->drain_started > s->opt.drain_s))
        atomic_store(&s->stop, 1);
    if (atomic_load(&s->stop) && s->evloop) ev_break(s->evloop, EVBREAK_ALL); /* srv_gateway_loop returns */
}
