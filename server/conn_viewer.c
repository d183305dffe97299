/* conn_viewer.c - a live-caption viewer (/v1/feeds/NAME[?key=KEY]): read-only,
 * it gets the feed's history, then the published session's viewer events from
 * a cursor of its own (feed.c has the feeds). A viewer needs the feed's key,
 * not an API key; one that falls behind is dropped, never the speaker slowed.
 * The service thread only. */
#define _POSIX_C_SOURCE 200809L
#include "conn.h"

#include <libwebsockets.h>
#include <stdlib.h>
#include <string.h>

#define VIEWER_OUTBOX 8 /* own messages waiting (history, errors, pongs); more are dropped */

static void say(srv_conn *c, char *json) { srv_conn_say_bounded(c, json, VIEWER_OUTBOX); }

/* A fatal error, then the close. */
static void refuse(srv_conn *c, const char *code, const char *msg) {
    say(c, srv_conn_error_json(code, msg, 1));
    c->close_after = LWS_CLOSE_STATUS_NORMAL;
}

static int viewer_open(srv *s, srv_conn *c, const char *uri, const char *full) {
    if (full) {
        refuse(c, "too_many_connections", full);
        atomic_fetch_add(&s->m.connections_rejected, 1);
        return 0;
    }
    const char *name = uri + strlen("/v1/feeds/");
    char key[SRV_FEED_NAME_MAX + 8] = "";
    const char *kv = lws_get_urlarg_by_name(c->wsi, "key=", key, (int)sizeof key);
    srv_session *ss = srv_feed_name_ok(name) ? srv_feed_find(s, name) : NULL;
    if (!ss) {
        refuse(c, "not_found", "no such feed");
        return 0;
    }
    pthread_mutex_lock(&ss->lock);
    int key_ok = !ss->feed_key[0] || (kv && strcmp(kv, ss->feed_key) == 0);
    pthread_mutex_unlock(&ss->lock);
    if (!key_ok) {
        srv_session_unref(s, ss);
        refuse(c, "forbidden", "this feed needs its viewer key (?key=...)");
        return 0;
    }
    if (srv_feed_viewer_add(ss, c->wsi)) {
        srv_session_unref(s, ss);
        refuse(c, "internal", "out of memory");
        return 0;
    }
    c->ss = ss; /* keeps the ref taken by find */
    pthread_mutex_lock(&ss->lock);
    c->cursor = ss->next_seq - 1;
    say(c, srv_feed_history_locked(ss));
    pthread_mutex_unlock(&ss->lock);
    atomic_fetch_add(&s->m.feed_viewers_total, 1);
    return 0;
}

/* A viewer may only ping; anything else is answered read_only. */
static void viewer_receive(srv *s, srv_conn *c, int binary) {
    (void)s;
    cJSON *msg = binary ? NULL : cJSON_ParseWithLength((const char *)c->rx, c->rx_len);
    const cJSON *t = msg ? cJSON_GetObjectItemCaseSensitive(msg, "type") : NULL;
    if (cJSON_IsString(t) && !strcmp(t->valuestring, "ping"))
        say(c, strdup("{\"type\":\"pong\"}"));
    else
        say(c, srv_conn_error_json("read_only", "feed viewers cannot send audio or control messages", 0));
    cJSON_Delete(msg);
}

static void viewer_close(srv *s, srv_conn *c) {
    if (!c->ss) return;
    srv_feed_viewer_remove(c->ss, c->wsi);
    srv_session_unref(s, c->ss);
    c->ss = NULL;
}

const srv_conn_kind srv_conn_viewer = {
    .name = "feed viewer",
    .read = SRV_READ_FEED,
    .open = viewer_open,
    .receive = viewer_receive,
    .close = viewer_close,
};
