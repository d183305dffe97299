/* event.h - what a dictation (dictation.h) tells its owner, as typed values.
 *
 * The dictation hands each event to its emit callback as a sotto_event; it
 * builds no JSON. Wire forms exist only at the edge: the server's sotto.v1
 * writer (server/v1_event.c, docs/PROTOCOL.md) and the dialects.
 *
 * Ownership: an event and everything it points to (texts, token arrays) are
 * borrowed for the duration of the callback; the owner copies what it keeps.
 * Times are absolute 16 kHz sample positions on the session's timeline (a
 * restored session's timeline continues its predecessor's). */
#ifndef SOTTO_EVENT_H
#define SOTTO_EVENT_H

#include <stdint.h>

typedef enum sotto_event_kind {
    SOTTO_EVENT_SPEECH_START, /* utterance, start */
    SOTTO_EVENT_SPEECH_END,   /* utterance, end */
    SOTTO_EVENT_PARTIAL,      /* utterance, pass, committed (+tokens), tentative (+tokens) */
    SOTTO_EVENT_COMMIT,       /* utterance, pass, text (the words just committed),
                                 committed (+tokens: the utterance's committed text so far) */
    SOTTO_EVENT_FINAL,        /* utterance, pass, text (+tokens as committed), start, end */
    SOTTO_EVENT_WARNING,      /* code, message; dropped (code "backlog") */
} sotto_event_kind;

typedef struct sotto_event {
    sotto_event_kind kind;
    uint64_t utterance; /* its utterance (1, 2, ...); 0 for a warning */
    uint64_t pass;      /* the pass that produced it (partial, commit, final); else 0 */
    uint64_t start;     /* speech_start: where speech starts; final: its window's start */
    uint64_t end;       /* speech_end: where it ends; final: its window's end */
    const char *text;   /* commit: the newly committed words; final: the utterance's text */
    const char *committed;            /* partial, commit: the utterance's committed text */
    const int32_t *committed_tokens;  /* partial, commit, final: the committed tokens */
    int n_committed;
    const char *tentative;            /* partial: the text after it, not yet settled */
    const int32_t *tentative_tokens;  /* partial: its tokens */
    int n_tentative;
    const char *code;    /* warning: a short machine-readable code ("backlog") */
    const char *message; /* warning: for people */
    uint64_t dropped;    /* warning "backlog": samples dropped so far */
} sotto_event;

/* A sample position in seconds (16 kHz). */
static inline double sotto_event_seconds(uint64_t sample) { return (double)sample / 16000.0; }

/* The kind's wire name ("speech_start", "partial", ...); "?" for no kind. */
const char *sotto_event_kind_name(sotto_event_kind kind);

typedef void (*sotto_emit_fn)(void *user, const sotto_event *event);

#endif
