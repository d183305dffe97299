/* source.c - audio for sotto-mic: a PortAudio input device at its native
 * rate, or a WAV file at real-time pace; encoded as 20 ms Opus packets.
 * Rates that Opus takes (8, 12, 16, 24, 48 kHz) are encoded as they are;
 * others are resampled to 48 kHz with speexdsp. */
#define _POSIX_C_SOURCE 200809L
#include "audio.h"
#include "log.h"
#include "mic.h"
#include "resample.h"

#include <math.h>
#include <opus/opus.h>
#include <portaudio.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct mic_source {
    mic_source_opts o;
    mic_packets *pk;
    void (*wake)(void *);
    void *user;
    pthread_t thread;
    int started;
    atomic_int stop;
    /* file */
    sotto_audio file;
    /* device */
    PaStream *stream;
    int pa_up;
    int dev_rate;
    sotto_resampler *rs;
    /* encoder */
    OpusEncoder *enc;
    int rate, frame; /* encoder rate, samples per 20 ms */
    float *acc;      /* samples waiting for a whole frame */
    size_t n_acc;
};

static int opus_rate_ok(int r) {
    return r == 8000 || r == 12000 || r == 16000 || r == 24000 || r == 48000;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Adds samples at the encoder rate; encodes every whole 20 ms frame. */
static int feed(mic_source *s, const float *x, size_t n) {
    unsigned char pkt[1500];
    while (n > 0) {
        size_t take = (size_t)s->frame - s->n_acc;
        if (take > n) take = n;
        memcpy(s->acc + s->n_acc, x, sizeof(float) * take);
        s->n_acc += take, x += take, n -= take;
        if (s->n_acc < (size_t)s->frame) break;
        int len = opus_encode_float(s->enc, s->acc, s->frame, pkt, (opus_int32)sizeof pkt);
        s->n_acc = 0;
        if (len < 0) {
            SOTTO_ERROR("opus_encode: %s", opus_strerror(len));
            return SOTTO_E_INTERNAL;
        }
        if (mic_packets_add(s->pk, pkt, len)) return SOTTO_E_NOMEM;
        s->wake(s->user);
    }
    return SOTTO_OK;
}

static void finish(mic_source *s) {
    if (s->n_acc > 0) { /* the last partial frame, padded with silence */
        float pad[960] = {0};
        feed(s, pad, (size_t)s->frame - s->n_acc);
    }
    pthread_mutex_lock(&s->pk->lock);
    s->pk->eof = 1;
    pthread_mutex_unlock(&s->pk->lock);
    s->wake(s->user);
}

static void *file_thread(void *arg) {
    mic_source *s = arg;
    const double t0 = now_s();
    size_t pos = 0;
    const size_t step = (size_t)s->frame;
    while (!atomic_load(&s->stop) && !atomic_load(s->o.interrupt) && pos < s->file.n) {
        /* frame k is sent once its audio has "happened" */
        double due = t0 + (double)(pos + step) / s->rate / s->o.speed;
        double wait = due - now_s();
        if (wait > 0) {
            struct timespec ts = {(time_t)wait, (long)((wait - (double)(time_t)wait) * 1e9)};
            nanosleep(&ts, NULL);
        }
        size_t n = s->file.n - pos < step ? s->file.n - pos : step;
        if (feed(s, s->file.samples + pos, n)) break;
        pos += n;
    }
    finish(s);
    return NULL;
}

static void *device_thread(void *arg) {
    mic_source *s = arg;
    const int chunk = s->dev_rate / 100; /* 10 ms reads */
    float *in = malloc(sizeof(float) * (size_t)chunk);
    /* The converter's output lags its input by the filter delay, so what one
     * chunk may produce (sotto_resampler_max_out) changes from call to call:
     * the buffer grows when it has to. */
    size_t cap = 0;
    float *out = NULL;
    while (in && !atomic_load(&s->stop) && !atomic_load(s->o.interrupt)) {
        PaError e = Pa_ReadStream(s->stream, in, (unsigned long)chunk);
        if (e != paNoError && e != paInputOverflowed) {
            SOTTO_ERROR("audio capture: %s", Pa_GetErrorText(e));
            break;
        }
        if (e == paInputOverflowed) SOTTO_WARN("audio capture: input overflow (samples lost)");
        if (s->rs) {
            size_t need = sotto_resampler_max_out(s->rs, (size_t)chunk), n = 0;
            if (need > cap) {
                float *grown = realloc(out, sizeof(float) * need);
                if (!grown) {
                    SOTTO_ERROR("audio capture: out of memory");
                    break;
                }
                out = grown, cap = need;
            }
            int rc = sotto_resampler_process(s->rs, in, (size_t)chunk, out, cap, &n);
            if (rc) {
                SOTTO_ERROR("audio capture: resampling %d -> %d Hz: %s", s->dev_rate, s->rate,
                            sotto_strerror(rc));
                break;
            }
            if (feed(s, out, n)) break;
        } else if (feed(s, in, (size_t)chunk)) {
            break;
        }
    }
    free(in);
    free(out);
    finish(s);
    return NULL;
}

/* The input device named `name`: an exact match, else the only input whose
 * name contains it. -1: none, -2: several contain it. */
static int find_device(const char *name) {
    int n = Pa_GetDeviceCount(), found = -1, count = 0;
    for (int i = 0; i < n; i++) {
        const PaDeviceInfo *di = Pa_GetDeviceInfo(i);
        if (!di || di->maxInputChannels < 1 || !di->name) continue;
        if (!strcmp(di->name, name)) return i;
        if (strstr(di->name, name)) found = i, count++;
    }
    return count > 1 ? -2 : found;
}

static int open_device(mic_source *s, sotto_err *err) {
    PaError e = Pa_Initialize();
    if (e != paNoError)
        return sotto_err_set(err, SOTTO_E_IO, "PortAudio: %s", Pa_GetErrorText(e));
    s->pa_up = 1;
    int dev = s->o.device >= 0 ? s->o.device : Pa_GetDefaultInputDevice();
    if (s->o.device_name) {
        dev = find_device(s->o.device_name);
        if (dev == -2)
            return sotto_err_set(err, SOTTO_E_IO,
                                 "several input devices match '%s'; give its number or whole "
                                 "name (see --list-devices)",
                                 s->o.device_name);
        if (dev < 0)
            return sotto_err_set(err, SOTTO_E_IO,
                                 "no input device named '%s' (see --list-devices)",
                                 s->o.device_name);
    }
    const PaDeviceInfo *di = dev >= 0 && dev < Pa_GetDeviceCount() ? Pa_GetDeviceInfo(dev) : NULL;
    if (!di || di->maxInputChannels < 1)
        return sotto_err_set(err, SOTTO_E_IO,
                             dev < 0 ? "no default input device (see --list-devices)"
                                     : "device %d is not an input device (see --list-devices)",
                             dev);
    s->dev_rate = (int)lround(di->defaultSampleRate);
    PaStreamParameters ip = {dev, 1, paFloat32, di->defaultLowInputLatency, NULL};
    e = Pa_OpenStream(&s->stream, &ip, NULL, s->dev_rate, (unsigned long)(s->dev_rate / 100),
                      paClipOff, NULL, NULL);
    if (e == paNoError) e = Pa_StartStream(s->stream);
    if (e != paNoError)
        return sotto_err_set(err, SOTTO_E_IO, "cannot capture from '%s' at %d Hz: %s", di->name,
                             s->dev_rate, Pa_GetErrorText(e));
    SOTTO_INFO("capturing from '%s' at %d Hz", di->name, s->dev_rate);
    s->rate = opus_rate_ok(s->dev_rate) ? s->dev_rate : 48000;
    if (s->rate != s->dev_rate &&
        !(s->rs = sotto_resampler_create(s->dev_rate, s->rate, SOTTO_RESAMPLE_QUALITY_STREAM, err)))
        return err->code;
    return SOTTO_OK;
}

static int open_file(mic_source *s, sotto_err *err) {
    int rc = sotto_wav_read(s->o.file, &s->file, err);
    if (rc) return rc;
    s->rate = s->file.sample_rate;
    if (!opus_rate_ok(s->rate)) {
        float *r = NULL;
        size_t n = 0;
        rc = sotto_resample(s->file.samples, s->file.n, s->rate, 48000, SOTTO_RESAMPLE_QUALITY_FILE,
                            &r, &n, err);
        if (rc) return rc;
        free(s->file.samples);
        s->file.samples = r;
        s->file.n = n;
        s->file.sample_rate = s->rate = 48000;
    }
    return SOTTO_OK;
}

mic_source *mic_source_start(const mic_source_opts *o, mic_packets *pk, void (*wake)(void *),
                             void *user, sotto_err *err) {
    mic_source *s = calloc(1, sizeof *s);
    if (!s) {
        sotto_err_set(err, SOTTO_E_NOMEM, "out of memory");
        return NULL;
    }
    s->o = *o;
    if (s->o.speed <= 0) s->o.speed = 1.0;
    static atomic_int never;
    if (!s->o.interrupt) s->o.interrupt = &never;
    s->pk = pk;
    s->wake = wake;
    s->user = user;
    atomic_init(&s->stop, 0);
    int rc = o->file ? open_file(s, err) : open_device(s, err);
    if (rc) goto fail;
    int oe = 0;
    s->enc = opus_encoder_create(s->rate, 1, OPUS_APPLICATION_AUDIO, &oe);
    if (!s->enc) {
        sotto_err_set(err, SOTTO_E_INTERNAL, "opus_encoder_create(%d Hz): %s", s->rate,
                      opus_strerror(oe));
        goto fail;
    }
    if (o->bitrate > 0) opus_encoder_ctl(s->enc, OPUS_SET_BITRATE(o->bitrate));
    s->frame = s->rate / 50;
    s->acc = malloc(sizeof(float) * (size_t)s->frame);
    if (!s->acc) {
        sotto_err_set(err, SOTTO_E_NOMEM, "out of memory");
        goto fail;
    }
    pk->rate = s->rate;
    if (pthread_create(&s->thread, NULL, o->file ? file_thread : device_thread, s)) {
        sotto_err_set(err, SOTTO_E_INTERNAL, "cannot start the audio thread");
        goto fail;
    }
    s->started = 1;
    return s;
fail:
    mic_source_stop(s);
    return NULL;
}

void mic_source_stop(mic_source *s) {
    if (!s) return;
    atomic_store(&s->stop, 1);
    if (s->started) pthread_join(s->thread, NULL);
    if (s->stream) {
        Pa_StopStream(s->stream);
        Pa_CloseStream(s->stream);
    }
    if (s->pa_up) Pa_Terminate();
    sotto_resampler_free(s->rs);
    if (s->enc) opus_encoder_destroy(s->enc);
    sotto_audio_free(&s->file);
    free(s->acc);
    free(s);
}

int mic_list_devices(void) {
    PaError e = Pa_Initialize();
    if (e != paNoError) {
        fprintf(stderr, "sotto-mic: PortAudio: %s\n", Pa_GetErrorText(e));
        return 1;
    }
    int n = Pa_GetDeviceCount(), def = Pa_GetDefaultInputDevice(), shown = 0;
    for (int i = 0; i < n; i++) {
        const PaDeviceInfo *di = Pa_GetDeviceInfo(i);
        if (!di || di->maxInputChannels < 1) continue;
        const PaHostApiInfo *hi = Pa_GetHostApiInfo(di->hostApi);
        printf("%3d%s %s (%s, %d ch, %.0f Hz)\n", i, i == def ? " *" : "  ", di->name,
               hi ? hi->name : "?", di->maxInputChannels, di->defaultSampleRate);
        shown++;
    }
    if (!shown) printf("no input devices\n");
    fflush(stdout); /* before Pa_Terminate: the list is out even if exiting goes wrong */
    Pa_Terminate();
    return 0;
}
