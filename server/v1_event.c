/* v1_event.c - sotto.v1 JSON of the dictation's typed events (see v1_event.h). */
#include "v1_event.h"

#include <string.h>

static int add_str(cJSON *o, const char *key, const char *v) {
    return cJSON_AddStringToObject(o, key, v ? v : "") != NULL;
}

static int add_num(cJSON *o, const char *key, double v) {
    return cJSON_AddNumberToObject(o, key, v) != NULL;
}

cJSON *srv_v1_event_json(const sotto_event *ev) {
    cJSON *o = cJSON_CreateObject();
    if (!o) return NULL;
    int ok = add_str(o, "type", sotto_event_kind_name(ev->kind));
    if (ev->utterance) ok = ok && add_num(o, "utterance", (double)ev->utterance);
    switch (ev->kind) {
    case SOTTO_EVENT_SPEECH_START: ok = ok && add_num(o, "start", sotto_event_seconds(ev->start)); break;
    case SOTTO_EVENT_SPEECH_END: ok = ok && add_num(o, "end", sotto_event_seconds(ev->end)); break;
    case SOTTO_EVENT_PARTIAL:
        ok = ok && add_num(o, "pass", (double)ev->pass) && add_str(o, "committed", ev->committed) &&
             add_str(o, "tentative", ev->tentative);
        break;
    case SOTTO_EVENT_COMMIT:
        ok = ok && add_num(o, "pass", (double)ev->pass) && add_str(o, "text", ev->text) &&
             add_str(o, "committed", ev->committed);
        break;
    case SOTTO_EVENT_FINAL:
        ok = ok && add_num(o, "pass", (double)ev->pass) && add_str(o, "text", ev->text) &&
             add_num(o, "start", sotto_event_seconds(ev->start)) && add_num(o, "end", sotto_event_seconds(ev->end));
        break;
    case SOTTO_EVENT_WARNING:
        ok = ok && add_str(o, "code", ev->code) && add_str(o, "message", ev->message);
        if (ev->code && !strcmp(ev->code, "backlog"))
            ok = ok && add_num(o, "dropped_seconds", sotto_event_seconds(ev->dropped));
        break;
    }
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}
