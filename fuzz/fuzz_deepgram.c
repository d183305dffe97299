/* fuzz_deepgram.c - the Deepgram live dialect (server/dg_listen.c) over a
 * stand-in connection (link_stub.h): its query parameters
 * (srv_dg_parse_query, then the dialect's open), audio in every encoding
 * (linear16, mulaw, alaw, raw Opus packets, Ogg Opus), KeepAlive / Finalize /
 * CloseStream, anything else, and session events to translate.
 *
 * Input: the query ("encoding=ogg-opus&sample_rate=48000", URL-decoded), a
 * NUL, then link_stub.h's option byte and records. The parsed query must be in
 * range; the stub checks everything the dialect sends and starts. */
#include "dg_listen.h"
#include "link_stub.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_srv_init();
    const uint8_t *nul = memchr(data, 0, size);
    if (!nul || (size_t)(nul - data) > 4096) return 0;
    size_t ql = (size_t)(nul - data);
    char *query = malloc(ql + 1);
    if (!query) abort();
    memcpy(query, data, ql + 1);
    srv_dg_query q;
    const char *why = srv_dg_parse_query(&q, query);
    if (!why) {
        if (q.enc < SRV_DG_LINEAR16 || q.enc > SRV_DG_OGG_OPUS || q.rate < 8000 || q.rate > 48000 ||
            q.channels < 1 || q.channels > 2 || (q.endpointing_ms && (q.endpointing_ms < 100 || q.endpointing_ms > 10000)) ||
            (q.utterance_end_ms && (q.utterance_end_ms < 1000 || q.utterance_end_ms > 5000)) ||
            !memchr(q.model, 0, sizeof q.model) || !memchr(q.language, 0, sizeof q.language))
            abort();
    } else if (!*why) {
        abort();
    }
    const uint8_t *rest = nul + 1;
    size_t n = size - ql - 1;
    srv_link l;
    fuzz_link_reset(&l, n ? rest[0] : 0);
    void *st = srv_dg_open_query(&l, query);
    free(query);
    if (!st) abort();
    if (why && !l.closing) abort(); /* a refused query closes the connection */
    fuzz_run_dialect(&srv_dialect_deepgram, st, &l, n ? rest + 1 : rest, n ? n - 1 : 0);
    return 0;
}
