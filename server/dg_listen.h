/* dg_listen.h - the pure parts of the Deepgram dialect (dg_listen.c): its
 * query parameters over a string, and the Ogg demuxer of encoding=ogg-opus.
 * fuzz/fuzz_deepgram.c and fuzz/fuzz_ogg_opus.c call them directly. */
#ifndef SOTTO_DG_LISTEN_H
#define SOTTO_DG_LISTEN_H

#include <ogg/ogg.h>
#include <stddef.h>

enum { SRV_DG_LINEAR16, SRV_DG_MULAW, SRV_DG_ALAW, SRV_DG_OPUS, SRV_DG_OGG_OPUS };

/* /v1/listen's query, checked: rate 8000..48000, channels 1..2, endpointing
 * 0 (absent) or 100..10000 ms, utterance_end_ms 0 (absent) or 1000..5000;
 * strings NUL-terminated. */
typedef struct srv_dg_query {
    int enc, rate, channels;
    char model[64], language[16];
    int interim, vad_events, endpointing_ms, utterance_end_ms;
} srv_dg_query;

/* query: "name=value&name=value..." with the values already URL-decoded (as
 * libwebsockets hands them over); the first occurrence of a name counts.
 * Returns NULL, or why the query is refused (*q then holds what was read). */
const char *srv_dg_parse_query(srv_dg_query *q, const char *query);

/* The dialect's open (srv_dialect_deepgram.open) with the query as a string
 * instead of the connection's (fuzz/fuzz_deepgram.c). */
struct srv_link;
void *srv_dg_open_query(struct srv_link *l, const char *query);

/* The largest Opus packet (61200 bytes, AI_OPUS_MAX_PACKET in
 * stream/audio_in.c) plus the largest Ogg page body (255 lacing values of
 * 255 bytes): the most an Ogg stream may keep of an unfinished packet. */
#define SRV_OGG_MAX_PENDING (61200 + 255 * 255)

/* An Ogg Opus stream's demuxer: OpusHead, OpusTags, then one Opus packet per
 * Ogg packet. Zero-initialise; srv_ogg_free releases it. */
typedef struct srv_ogg {
    int sync_ready, stream_ready, packets;
    ogg_sync_state oy;
    ogg_stream_state os;
} srv_ogg;

/* Called for each complete packet of the first logical stream: index 0 is
 * OpusHead (checked: "OpusHead", 19 bytes at least), 1 OpusTags, then audio.
 * Nonzero stops the push. */
typedef int (*srv_ogg_packet_fn)(void *user, int index, const unsigned char *packet, size_t len);

/* Feeds bytes of the stream (any split). 0: all taken; 1: the callback
 * stopped; -1: the stream is refused (why: no OpusHead, or a packet longer
 * than SRV_OGG_MAX_PENDING allows; out of memory) and must not be pushed to
 * again. The demuxer keeps at most one page's bytes beyond that bound. */
int srv_ogg_opus_push(srv_ogg *g, const void *data, size_t len, srv_ogg_packet_fn fn, void *user,
                      const char **why);
void srv_ogg_free(srv_ogg *g);

#endif
