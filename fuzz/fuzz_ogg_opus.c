/* fuzz_ogg_opus.c - the Deepgram dialect's Ogg Opus demuxer
 * (srv_ogg_opus_push, server/dg_listen.c) on a stream split into messages.
 *
 * Input: records of a little-endian u16 length and that many bytes, each one
 * push. Checks: packet 0 is an OpusHead of 19 bytes at least; no packet is
 * longer than the demuxer's bound; after every push the demuxer keeps at most
 * one page of bytes waiting for a page end (the sync buffer) and at most
 * SRV_OGG_MAX_PENDING of an unfinished packet; a refused stream says why. */
#include "dg_listen.h"
#include "link_stub.h" /* dg_listen.c's other functions need a connection to link */

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define OGG_MAX_PAGE (27 + 255 + 255 * 255)

static int g_packets;

static int on_packet(void *user, int index, const unsigned char *pk, size_t len) {
    (void)user;
    if (index < 0 || index > 2 || (index == 0 && (len < 19 || memcmp(pk, "OpusHead", 8)))) abort();
    if (len > SRV_OGG_MAX_PENDING) abort();
    volatile unsigned char sink = 0;
    if (len) sink ^= pk[0] ^ pk[len - 1];
    (void)sink;
    g_packets++;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static int quiet;
    if (!quiet) sotto_log_set_level(SOTTO_LOG_ERROR), quiet = 1;
    srv_ogg g;
    memset(&g, 0, sizeof g);
    size_t off = 0;
    g_packets = 0;
    while (size - off >= 2) {
        size_t len = (size_t)data[off] | (size_t)data[off + 1] << 8;
        off += 2;
        if (len > size - off) len = size - off;
        unsigned char *m = malloc(len ? len : 1);
        if (!m) abort();
        memcpy(m, data + off, len);
        off += len;
        const char *why = NULL;
        int rc = srv_ogg_opus_push(&g, m, len, on_packet, NULL, &why);
        free(m);
        if (rc < 0) {
            if (!why || !*why) abort();
            break;
        }
        if (rc != 0) abort();
        long waiting = g.oy.fill - g.oy.returned;
        if (waiting < 0 || waiting > OGG_MAX_PAGE) {
            fprintf(stderr, "the sync buffer keeps %ld bytes after a push\n", waiting);
            abort();
        }
        if (g.stream_ready && g.os.body_fill - g.os.body_returned > SRV_OGG_MAX_PENDING) abort();
    }
    srv_ogg_free(&g);
    return 0;
}
