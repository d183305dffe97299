/* mic.h - sotto-mic, the desktop dictation client: audio from a PortAudio
 * input device or a WAV file (at real-time pace), encoded as Opus (20 ms
 * frames), streamed to sotto-server (docs/PROTOCOL.md); tentative text is
 * shown in place, finals as lines.
 *
 * Threads: a source thread captures (or reads) audio and encodes packets
 * into a mic_packets store; the main thread runs the libwebsockets client
 * (mic/link.c), which sends packets and keeps every packet the server has
 * not acknowledged, so that after a dropped connection it can resume the
 * session and resend from the server's acknowledged offset.
 */
#ifndef SOTTO_MIC_H
#define SOTTO_MIC_H

#include "sotto_err.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>

/* Encoded packets, produced by the source thread, consumed by the link.
 * Packet i stays until the server acknowledged more than i packets. */
typedef struct mic_packets {
    pthread_mutex_t lock;
    unsigned char **data; /* data[i], len[i]: packet i (NULL once acknowledged) */
    int *len;
    size_t n, cap;        /* packets produced */
    size_t acked;         /* packets below this were acknowledged and freed */
    int eof;              /* the source has ended (file done, or stopped) */
    int rate;             /* Opus encoder rate (8/12/16/24/48 kHz) */
} mic_packets;

int mic_packets_init(mic_packets *pk);
void mic_packets_free(mic_packets *pk);
/* Appends a copy; returns 0 or SOTTO_E_NOMEM. */
int mic_packets_add(mic_packets *pk, const unsigned char *p, int len);
/* Frees the packets below `offset` (an ack). */
void mic_packets_ack(mic_packets *pk, size_t offset);
/* Copies packet i into buf (cap bytes); returns its length, 0 if it is not
 * there (not produced yet, or already freed), -1 if it does not fit. */
int mic_packets_get(mic_packets *pk, size_t i, unsigned char *buf, int cap, size_t *n_total,
                    int *eof);

/* ---- sources ----------------------------------------------------------------- */

typedef struct mic_source_opts {
    const char *file;  /* WAV file streamed at real-time pace, or NULL: a device */
    int device;        /* PortAudio device index, -1: the default input */
    double speed;      /* file pace: 1 = real time */
    int bitrate;       /* Opus bits/s, 0: libopus's default */
    atomic_int *interrupt; /* set (Ctrl-C): the source flushes its last frame and ends */
    const char *device_name; /* non-NULL: the input device of this name (exact, else the
                                only one whose name contains it), instead of `device` */
} mic_source_opts;

typedef struct mic_source mic_source;

/* Opens the source and starts its thread; wake(user) is called after each
 * packet (from the source thread). */
mic_source *mic_source_start(const mic_source_opts *o, mic_packets *pk, void (*wake)(void *),
                             void *user, sotto_err *err);
/* Ends capture (a file source also ends by itself), joins the thread and
 * frees; accepts NULL. */
void mic_source_stop(mic_source *s);
/* Prints the input devices (index, name, channels, default rate). */
int mic_list_devices(void);

/* ---- the connection ----------------------------------------------------------- */

typedef struct mic_link_opts {
    const char *url;      /* ws://host:port/v1/stream or wss://... */
    int insecure;         /* wss: accept any certificate */
    const char *weights;  /* start fields, NULL: the server's default */
    const char *language;
    const char *task;
    const char *output;   /* finals appended as lines, NULL: none */
    int quiet;            /* no partial display */
    double drop_after_s;  /* testing: cut the connection once after this much audio */
    int max_reconnects;
} mic_link_opts;

/* Runs the session until `done` (returns 0), a fatal error or a connection
 * that cannot be resumed (1). *interrupt set (SIGINT) ends the input: the
 * server gets `stop` once everything captured is sent. */
int mic_link_run(const mic_link_opts *o, mic_packets *pk, atomic_int *interrupt);

/* For the source thread and the signal handler (async-signal-safe): wakes
 * the link's loop; does nothing before mic_link_run created it. */
void mic_link_wake(void *unused);

#endif
