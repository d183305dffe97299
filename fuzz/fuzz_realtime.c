/* fuzz_realtime.c - the OpenAI Realtime dialect (server/rt_openai.c) over a
 * stand-in connection (link_stub.h): session.update /
 * transcription_session.update, input_audio_buffer.append / commit / clear,
 * anything else, binary messages, and session events to translate.
 *
 * Input: link_stub.h's records. The stub checks every message the dialect
 * sends and every start it builds (the native start checks). */
#include "link_stub.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_srv_init();
    if (size < 1) return 0;
    srv_link l;
    fuzz_link_reset(&l, data[0]);
    l.whole_samples = 1;
    void *st = srv_dialect_openai_rt.open(&l, NULL);
    if (!st) abort();
    fuzz_run_dialect(&srv_dialect_openai_rt, st, &l, data + 1, size - 1);
    if (l.sent == 0) abort(); /* session.created at least */
    return 0;
}
