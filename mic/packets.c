/* packets.c - the store of encoded packets between the source and the link. */
#include "mic.h"

#include <stdlib.h>
#include <string.h>

int mic_packets_init(mic_packets *pk) {
    memset(pk, 0, sizeof *pk);
    return pthread_mutex_init(&pk->lock, NULL) ? SOTTO_E_INTERNAL : SOTTO_OK;
}

void mic_packets_free(mic_packets *pk) {
    for (size_t i = pk->acked; i < pk->n; i++) free(pk->data[i]);
    free(pk->data);
    free(pk->len);
    pthread_mutex_destroy(&pk->lock);
    memset(pk, 0, sizeof *pk);
}

int mic_packets_add(mic_packets *pk, const unsigned char *p, int len) {
    unsigned char *copy = malloc(len > 0 ? (size_t)len : 1);
    if (!copy) return SOTTO_E_NOMEM;
    memcpy(copy, p, (size_t)len);
    pthread_mutex_lock(&pk->lock);
    if (pk->n == pk->cap) {
        size_t cap = pk->cap ? pk->cap * 2 : 1024;
        unsigned char **d = realloc(pk->data, sizeof *d * cap);
        if (d) pk->data = d;
        int *l = d ? realloc(pk->len, sizeof *l * cap) : NULL;
        if (l) pk->len = l;
        if (!d || !l) {
            pthread_mutex_unlock(&pk->lock);
            free(copy);
            return SOTTO_E_NOMEM;
        }
        pk->cap = cap;
    }
    pk->data[pk->n] = copy;
    pk->len[pk->n] = len;
    pk->n++;
    pthread_mutex_unlock(&pk->lock);
    return SOTTO_OK;
}

void mic_packets_ack(mic_packets *pk, size_t offset) {
    pthread_mutex_lock(&pk->lock);
    if (offset > pk->n) offset = pk->n;
    while (pk->acked < offset) {
        free(pk->data[pk->acked]);
        pk->data[pk->acked] = NULL;
        pk->acked++;
    }
    pthread_mutex_unlock(&pk->lock);
}

int mic_packets_get(mic_packets *pk, size_t i, unsigned char *buf, int cap, size_t *n_total,
                    int *eof) {
    pthread_mutex_lock(&pk->lock);
    int r = 0;
    if (i < pk->n && i >= pk->acked) {
        r = pk->len[i] <= cap ? pk->len[i] : -1;
        if (r > 0) memcpy(buf, pk->data[i], (size_t)r);
    }
    if (n_total) *n_total = pk->n;
    if (eof) *eof = pk->eof;
    pthread_mutex_unlock(&pk->lock);
    return r;
}
