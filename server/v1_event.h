/* v1_event.h - the sotto.v1 wire form of a dictation event (docs/PROTOCOL.md).
 *
 * The dictation emits typed events (include/event.h); this is the one place
 * that turns them into sotto.v1 JSON objects. The session (session.c) adds
 * the sequence number and keeps the printed form in its ring. */
#ifndef SOTTO_SERVER_V1_EVENT_H
#define SOTTO_SERVER_V1_EVENT_H

#include "event.h"

#include <cjson/cJSON.h>

/* A new object (the caller owns it): type, utterance and the kind's fields,
 * times in seconds; a NULL text is written as "". NULL when out of memory. */
cJSON *srv_v1_event_json(const sotto_event *ev);

#endif
