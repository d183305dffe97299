/* ring.c - typed ring entries (ring.h). */
#define _POSIX_C_SOURCE 200809L
#include "ring.h"

#include "json_get.h"

#include <stdlib.h>
#include <string.h>

static const struct {
    const char *name;
    srv_event_type type;
} k_types[] = {
    {"speech_start", SRV_EV_SPEECH_START}, {"speech_end", SRV_EV_SPEECH_END}, {"partial", SRV_EV_PARTIAL},
    {"commit", SRV_EV_COMMIT},             {"final", SRV_EV_FINAL},           {"warning", SRV_EV_WARNING},
    {"ack", SRV_EV_ACK},                   {"error", SRV_EV_ERROR},           {"done", SRV_EV_DONE},
};

/* A copy of s (NULL stays NULL); *bad set when out of memory. */
static char *dup(const char *s, int *bad) {
    if (!s) return NULL;
    char *d = strdup(s);
    if (!d) *bad = 1;
    return d;
}

int srv_event_from_json(srv_event *e, const cJSON *ev) {
    memset(e, 0, sizeof *e);
    const char *t = srv_jstr(ev, "type");
    if (!t) return 0;
    int bad = 0;
    if (!strncmp(t, "x_", 2)) {
        e->type = SRV_EV_NOTE;
        e->text = dup(t, &bad);
    }
    for (size_t i = 0; i < sizeof k_types / sizeof k_types[0]; i++)
        if (!strcmp(t, k_types[i].name)) e->type = k_types[i].type;
    double u = srv_jnum(ev, "utterance");
    e->utterance = u >= 1 && u <= 2147483647.0 ? (int)u : 0;
    e->start = srv_jnum(ev, "start");
    e->end = srv_jnum(ev, "end");
    e->offset = srv_jnum(ev, "offset");
    e->audio_s = srv_jnum(ev, "audio_seconds");
    e->dropped_s = srv_jnum(ev, "dropped_seconds");
    e->fatal = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(ev, "fatal"));
    if (e->type != SRV_EV_NOTE) e->text = dup(srv_jstr(ev, "text"), &bad);
    e->committed = dup(srv_jstr(ev, "committed"), &bad);
    e->tentative = dup(srv_jstr(ev, "tentative"), &bad);
    e->code = dup(srv_jstr(ev, "code"), &bad);
    e->message = dup(srv_jstr(ev, "message"), &bad);
    if (bad) srv_event_clear(e);
    return bad ? -1 : 0;
}

int srv_event_from_dictation(srv_event *e, const sotto_event *ev) {
    memset(e, 0, sizeof *e);
    static const srv_event_type types[] = {
        [SOTTO_EVENT_SPEECH_START] = SRV_EV_SPEECH_START, [SOTTO_EVENT_SPEECH_END] = SRV_EV_SPEECH_END,
        [SOTTO_EVENT_PARTIAL] = SRV_EV_PARTIAL,           [SOTTO_EVENT_COMMIT] = SRV_EV_COMMIT,
        [SOTTO_EVENT_FINAL] = SRV_EV_FINAL,               [SOTTO_EVENT_WARNING] = SRV_EV_WARNING,
    };
    int bad = 0;
    e->type = types[ev->kind];
    e->utterance = (int)ev->utterance;
    if (ev->kind == SOTTO_EVENT_SPEECH_START || ev->kind == SOTTO_EVENT_FINAL) e->start = sotto_event_seconds(ev->start);
    if (ev->kind == SOTTO_EVENT_SPEECH_END || ev->kind == SOTTO_EVENT_FINAL) e->end = sotto_event_seconds(ev->end);
    if (ev->kind == SOTTO_EVENT_COMMIT || ev->kind == SOTTO_EVENT_FINAL) e->text = dup(ev->text, &bad);
    if (ev->kind == SOTTO_EVENT_PARTIAL || ev->kind == SOTTO_EVENT_COMMIT) e->committed = dup(ev->committed, &bad);
    if (ev->kind == SOTTO_EVENT_PARTIAL) e->tentative = dup(ev->tentative, &bad);
    if (ev->kind == SOTTO_EVENT_WARNING) {
        e->code = dup(ev->code, &bad);
        e->message = dup(ev->message, &bad);
        if (ev->code && !strcmp(ev->code, "backlog")) e->dropped_s = sotto_event_seconds(ev->dropped);
    }
    if (bad) srv_event_clear(e);
    return bad ? -1 : 0;
}

int srv_event_copy_fields(srv_event *dst, const srv_event *src) {
    *dst = *src;
    dst->json = NULL;
    dst->len = 0;
    int bad = 0;
    dst->text = dup(src->text, &bad);
    dst->committed = dup(src->committed, &bad);
    dst->tentative = dup(src->tentative, &bad);
    dst->code = dup(src->code, &bad);
    dst->message = dup(src->message, &bad);
    if (bad) srv_event_clear(dst);
    return bad ? -1 : 0;
}

int srv_event_for_viewers(srv_event_type t) {
    return t == SRV_EV_SPEECH_START || t == SRV_EV_SPEECH_END || t == SRV_EV_PARTIAL || t == SRV_EV_COMMIT ||
           t == SRV_EV_FINAL || t == SRV_EV_DONE;
}

void srv_event_clear(srv_event *e) {
    free(e->text);
    free(e->committed);
    free(e->tentative);
    free(e->code);
    free(e->message);
    free(e->json);
    memset(e, 0, sizeof *e);
}
