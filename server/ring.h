/* ring.h - an entry of a session's event ring, typed.
 *
 * Every event a session sends lives in its ring (server.h: srv_session.ring)
 * until it leaves the ring's window: its sotto.v1 JSON, printed once when it
 * is emitted (the sotto.v1 writer and feed viewers send it as it is; a
 * resume replays it), and its typed fields, which the dialects (OpenAI,
 * Deepgram) translate from and the ring's bookkeeping reads. Nothing reads a
 * field back out of the JSON.
 *
 * Ownership: an entry owns its strings and its JSON (srv_event_clear frees
 * them). The strings are NULL where the event has none.
 */
#ifndef SOTTO_SERVER_RING_H
#define SOTTO_SERVER_RING_H

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdint.h>

#include "event.h"

typedef enum srv_event_type {
    SRV_EV_OTHER = 0,   /* nothing a writer looks into: hello, ready, language, pong, ... */
    SRV_EV_SPEECH_START, /* utterance, start */
    SRV_EV_SPEECH_END,   /* utterance, end */
    SRV_EV_PARTIAL,      /* utterance, committed, tentative */
    SRV_EV_COMMIT,       /* utterance, text (the words just committed), committed */
    SRV_EV_FINAL,        /* utterance, text, start, end */
    SRV_EV_WARNING,      /* code, message */
    SRV_EV_ACK,          /* offset (the client's units) */
    SRV_EV_ERROR,        /* code, message, fatal; utterance when a pass of it failed */
    SRV_EV_DONE,         /* audio_s, dropped_s */
    SRV_EV_NOTE,         /* a dialect's marker in event order (srv_link_note); text: its name */
} srv_event_type;

typedef struct srv_event {
    uint64_t seq;
    srv_event_type type;
    int utterance;      /* its utterance (1, 2, ...), 0 for none */
    double start, end;  /* seconds on the session's timeline */
    double offset;      /* ack */
    double audio_s, dropped_s; /* done: audio heard, audio dropped (seconds) */
    int fatal;          /* error */
    char *text, *committed, *tentative, *code, *message;
    char *json; /* its sotto.v1 JSON, with seq */
    size_t len;
    /* ring bookkeeping */
    int viewer;     /* feed viewers get it (speech_start, partial, commit, final, speech_end, done) */
    int superseded; /* a partial that a later partial/commit/final of its utterance replaces,
                       or an ack that a later ack replaces: skipped when the connection
                       lags (SRV_LAG_SKIP events behind), never the reason to cull it */
} srv_event;

/* The typed fields of a sotto.v1 event (or a dialect's note, whose "type"
 * starts with "x_"), strings copied. -1 when out of memory (e cleared). */
int srv_event_from_json(srv_event *e, const cJSON *ev);
/* The typed fields of a dictation event, strings copied. -1: out of memory. */
int srv_event_from_dictation(srv_event *e, const sotto_event *ev);
/* A copy of src's typed fields, not its JSON (a writer translates it
 * without the session lock). -1: out of memory (dst cleared). */
int srv_event_copy_fields(srv_event *dst, const srv_event *src);
/* 1 for the types live-caption viewers get: speech_start, speech_end,
 * partial, commit, final, done. */
int srv_event_for_viewers(srv_event_type type);
/* Frees what e owns and zeroes it. */
void srv_event_clear(srv_event *e);

#endif
