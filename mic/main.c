/* main.c - sotto-mic: dictate into a terminal from a microphone (or a WAV
 * file) through sotto-server. See mic.h. */
#define _POSIX_C_SOURCE 200809L
#include "log.h"
#include "mic.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static atomic_int g_interrupt;

static void on_sigint(int sig) {
    (void)sig;
    if (atomic_exchange(&g_interrupt, 1)) _exit(130); /* second Ctrl-C: now */
    mic_link_wake(NULL);
}

static void usage(FILE *f) {
    fprintf(f,
            "usage: sotto-mic [options]\n"
            "Streams a microphone (or --file) to sotto-server and prints the text: the\n"
            "utterance being spoken in place (tentative text dimmed), finals as lines.\n"
            "Ctrl-C ends the input: the server finishes the text, then sotto-mic exits.\n"
            "\n"
            "  --server URL          ws://HOST:PORT/v1/stream (default ws://127.0.0.1:8765/v1/stream)\n"
            "  --list-devices        print the input devices and exit\n"
            "  --device N|NAME       capture from input device N, or the one named NAME (or whose\n"
            "                        name contains NAME); default: the system's default\n"
            "  --file WAV            stream a WAV file at real-time pace instead\n"
            "  --speed X             file pace, 1 = real time (default 1)\n"
            "  --output FILE         also write the final text to FILE, a line per utterance\n"
            "  --weights W           f32 | bf16 | q8 | nf4 | nvfp4 (default: the server's)\n"
            "  --language L          language code or auto (default: the server's)\n"
            "  --task T              transcribe | translate\n"
            "  --bitrate N           Opus bits per second (default: libopus's choice)\n"
            "  --reconnects N        connection attempts after a drop (default 20)\n"
            "  --insecure            wss: accept any certificate\n"
            "  --quiet               finals only (no in-place partial text)\n"
            "  --log-level L         debug | info | warn | error (default warn)\n"
            "  --test-drop-after S   testing: break the connection once after S s of audio\n");
}

int main(int argc, char **argv) {
    mic_link_opts lo = {"ws://127.0.0.1:8765/v1/stream", 0, NULL, NULL, NULL, NULL, 0, 0, 20};
    mic_source_opts so = {NULL, -1, 1.0, 0, &g_interrupt, NULL};
    int list = 0;
    sotto_log_set_level(SOTTO_LOG_WARN);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
#define ARG(name) (!strcmp(a, name) && (v ? (i++, 1) : (fprintf(stderr, "sotto-mic: %s needs a value\n", name), exit(2), 0)))
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--list-devices")) {
            list = 1;
        } else if (!strcmp(a, "--insecure")) {
            lo.insecure = 1;
        } else if (!strcmp(a, "--quiet")) {
            lo.quiet = 1;
        } else if (ARG("--server")) {
            lo.url = v;
        } else if (ARG("--device")) {
            if (v[0] && strspn(v, "0123456789") == strlen(v))
                so.device = atoi(v);
            else
                so.device_name = v;
        } else if (ARG("--file")) {
            so.file = v;
        } else if (ARG("--speed")) {
            so.speed = atof(v);
        } else if (ARG("--output")) {
            lo.output = v;
        } else if (ARG("--weights")) {
            lo.weights = v;
        } else if (ARG("--language")) {
            lo.language = v;
        } else if (ARG("--task")) {
            lo.task = v;
        } else if (ARG("--bitrate")) {
            so.bitrate = atoi(v);
        } else if (ARG("--reconnects")) {
            lo.max_reconnects = atoi(v);
        } else if (ARG("--test-drop-after")) {
            lo.drop_after_s = atof(v);
        } else if (ARG("--log-level")) {
            const char *names[] = {"debug", "info", "warn", "error"};
            int k = 0;
            while (k < 4 && strcmp(v, names[k])) k++;
            if (k == 4) {
                fprintf(stderr, "sotto-mic: unknown log level '%s'\n", v);
                return 2;
            }
            sotto_log_set_level((sotto_log_level)k);
        } else {
            fprintf(stderr, "sotto-mic: unknown option '%s'\n", a);
            usage(stderr);
            return 2;
        }
#undef ARG
    }
    if (list) return mic_list_devices();
    if (so.speed <= 0 || so.speed > 1000 || lo.max_reconnects < 0) {
        fprintf(stderr, "sotto-mic: --speed must be in (0, 1000], --reconnects >= 0\n");
        return 2;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);

    mic_packets pk;
    if (mic_packets_init(&pk)) return 1;
    sotto_err err;
    sotto_err_clear(&err);
    mic_source *src = mic_source_start(&so, &pk, mic_link_wake, NULL, &err);
    if (!src) {
        fprintf(stderr, "sotto-mic: %s\n", err.msg);
        mic_packets_free(&pk);
        return 1;
    }
    int rc = mic_link_run(&lo, &pk, &g_interrupt);
    mic_source_stop(src);
    mic_packets_free(&pk);
    return rc;
}
