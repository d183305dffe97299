/* test_ring.c - the typed entries of a session's event ring (server/ring.h):
 * a dictation event typed directly and the same event typed from its sotto.v1
 * JSON (server/v1_event.c) agree field by field; the server's own messages
 * and a dialect's notes are typed from JSON; copies own their strings; the
 * set of events that feed viewers get. Run under ASan, which also checks
 * that clear frees everything exactly once. */
#define _POSIX_C_SOURCE 200809L
#include "check.h"
#include "ring.h"
#include "v1_event.h"

#include <stdlib.h>
#include <string.h>

static int same_str(const char *a, const char *b) { return (!a && !b) || (a && b && !strcmp(a, b)); }

static int same_fields(const srv_event *a, const srv_event *b) {
    return a->type == b->type && a->utterance == b->utterance && a->start == b->start && a->end == b->end &&
           a->offset == b->offset && a->audio_s == b->audio_s && a->dropped_s == b->dropped_s &&
           a->fatal == b->fatal && same_str(a->text, b->text) && same_str(a->committed, b->committed) &&
           same_str(a->tentative, b->tentative) && same_str(a->code, b->code) && same_str(a->message, b->message);
}

/* Typed directly and through its sotto.v1 JSON: the same fields. */
static void check_both_paths(const sotto_event *ev, srv_event_type want) {
    srv_event direct, via;
    CHECK(srv_event_from_dictation(&direct, ev) == 0);
    cJSON *j = srv_v1_event_json(ev);
    CHECK(j != NULL);
    CHECK(srv_event_from_json(&via, j) == 0);
    cJSON_Delete(j);
    CHECK_EQ_INT(direct.type, want);
    CHECK_MSG(same_fields(&direct, &via), "%s: typed directly and from its JSON differ",
              sotto_event_kind_name(ev->kind));
    srv_event_clear(&direct);
    srv_event_clear(&via);
}

static void test_dictation_events(void) {
    sotto_event ev = {0};
    ev.kind = SOTTO_EVENT_SPEECH_START, ev.utterance = 3, ev.start = 24000;
    check_both_paths(&ev, SRV_EV_SPEECH_START);
    srv_event e;
    CHECK(srv_event_from_dictation(&e, &ev) == 0);
    CHECK(e.start == 1.5 && e.utterance == 3);
    srv_event_clear(&e);

    ev = (sotto_event){.kind = SOTTO_EVENT_SPEECH_END, .utterance = 3, .end = 40000};
    check_both_paths(&ev, SRV_EV_SPEECH_END);
    ev = (sotto_event){.kind = SOTTO_EVENT_PARTIAL, .utterance = 3, .pass = 7, .committed = " Hello",
                       .tentative = " wor"};
    check_both_paths(&ev, SRV_EV_PARTIAL);
    ev = (sotto_event){.kind = SOTTO_EVENT_COMMIT, .utterance = 3, .pass = 8, .text = " world",
                       .committed = " Hello world"};
    check_both_paths(&ev, SRV_EV_COMMIT);
    ev = (sotto_event){.kind = SOTTO_EVENT_FINAL, .utterance = 3, .pass = 9, .text = " Hello world.",
                       .start = 16000, .end = 56000};
    check_both_paths(&ev, SRV_EV_FINAL);
    CHECK(srv_event_from_dictation(&e, &ev) == 0);
    CHECK(e.start == 1.0 && e.end == 3.5 && !strcmp(e.text, " Hello world.") && e.text != ev.text);
    srv_event_clear(&e);
    ev = (sotto_event){.kind = SOTTO_EVENT_WARNING, .code = "backlog", .message = "audio dropped",
                       .dropped = 8000};
    check_both_paths(&ev, SRV_EV_WARNING);
    CHECK(srv_event_from_dictation(&e, &ev) == 0);
    CHECK(e.dropped_s == 0.5 && !strcmp(e.code, "backlog"));
    srv_event_clear(&e);
}

static srv_event typed(const char *json) {
    srv_event e;
    cJSON *j = cJSON_Parse(json);
    CHECK(j != NULL);
    CHECK(srv_event_from_json(&e, j) == 0);
    cJSON_Delete(j); /* the entry keeps its own copies */
    return e;
}

static void test_server_messages(void) {
    srv_event e = typed("{\"type\":\"ack\",\"offset\":48000,\"durable\":32000,\"seq\":5}");
    CHECK_EQ_INT(e.type, SRV_EV_ACK);
    CHECK(e.offset == 48000);
    srv_event_clear(&e);

    e = typed("{\"type\":\"error\",\"code\":\"overloaded\",\"message\":\"no slot\",\"fatal\":true}");
    CHECK_EQ_INT(e.type, SRV_EV_ERROR);
    CHECK(e.fatal == 1 && !strcmp(e.code, "overloaded") && !strcmp(e.message, "no slot"));
    srv_event_clear(&e);
    e = typed("{\"type\":\"error\",\"code\":\"bad_audio\",\"message\":\"m\",\"fatal\":false}");
    CHECK(e.fatal == 0);
    srv_event_clear(&e);

    e = typed("{\"type\":\"done\",\"audio_seconds\":12.5,\"dropped_seconds\":0.25}");
    CHECK_EQ_INT(e.type, SRV_EV_DONE);
    CHECK(e.audio_s == 12.5 && e.dropped_s == 0.25);
    srv_event_clear(&e);

    /* a dialect's marker: its name in text */
    e = typed("{\"type\":\"x_rt_clear\"}");
    CHECK_EQ_INT(e.type, SRV_EV_NOTE);
    CHECK(e.text && !strcmp(e.text, "x_rt_clear"));
    srv_event_clear(&e);

    /* messages no writer looks into, and malformed ones */
    const char *other[] = {"{\"type\":\"hello\",\"protocol\":\"sotto.v1\"}", "{\"type\":\"pong\"}",
                           "{\"type\":\"ready\"}", "{\"type\":7}", "{}", "{\"type\":\"finalx\"}"};
    for (size_t i = 0; i < sizeof other / sizeof other[0]; i++) {
        e = typed(other[i]);
        CHECK_MSG(e.type == SRV_EV_OTHER, "%s", other[i]);
        srv_event_clear(&e);
    }
    /* wrong field types are absent, not misread */
    e = typed("{\"type\":\"final\",\"utterance\":\"2\",\"text\":5,\"start\":\"1\"}");
    CHECK(e.type == SRV_EV_FINAL && e.utterance == 0 && e.text == NULL && e.start == 0);
    srv_event_clear(&e);
    /* an utterance number outside int is 0, not undefined behaviour */
    const char *utts[] = {"{\"type\":\"final\",\"utterance\":1e300}", "{\"type\":\"final\",\"utterance\":-5}",
                          "{\"type\":\"final\",\"utterance\":2147483648}"};
    for (size_t i = 0; i < sizeof utts / sizeof utts[0]; i++) {
        e = typed(utts[i]);
        CHECK_MSG(e.utterance == 0, "%s", utts[i]);
        srv_event_clear(&e);
    }
    e = typed("{\"type\":\"final\",\"utterance\":2147483647}");
    CHECK(e.utterance == 2147483647);
    srv_event_clear(&e);
}

static void test_copy_and_clear(void) {
    srv_event e = typed("{\"type\":\"partial\",\"utterance\":4,\"committed\":\" a\",\"tentative\":\" b\"}");
    e.json = strdup("{\"type\":\"partial\"}");
    e.len = strlen(e.json);
    e.seq = 42;
    e.superseded = 1;
    srv_event c;
    CHECK(srv_event_copy_fields(&c, &e) == 0);
    CHECK(same_fields(&c, &e));
    CHECK(c.seq == 42 && c.superseded == 1);
    CHECK(c.json == NULL && c.len == 0); /* the fields, not the JSON */
    CHECK(c.committed != e.committed && c.tentative != e.tentative);
    srv_event_clear(&e); /* the copy outlives its source */
    CHECK(!strcmp(c.committed, " a") && !strcmp(c.tentative, " b"));
    srv_event_clear(&c);
    CHECK(c.committed == NULL && c.type == SRV_EV_OTHER);
    srv_event_clear(&c); /* clearing twice is harmless */
}

static void test_viewer_set(void) {
    const srv_event_type yes[] = {SRV_EV_SPEECH_START, SRV_EV_SPEECH_END, SRV_EV_PARTIAL,
                                  SRV_EV_COMMIT,       SRV_EV_FINAL,      SRV_EV_DONE};
    const srv_event_type no[] = {SRV_EV_OTHER, SRV_EV_WARNING, SRV_EV_ACK, SRV_EV_ERROR, SRV_EV_NOTE};
    for (size_t i = 0; i < sizeof yes / sizeof yes[0]; i++) CHECK(srv_event_for_viewers(yes[i]));
    for (size_t i = 0; i < sizeof no / sizeof no[0]; i++) CHECK(!srv_event_for_viewers(no[i]));
}

int main(void) {
    test_dictation_events();
    test_server_messages();
    test_copy_and_clear();
    test_viewer_set();
    return check_report();
}
