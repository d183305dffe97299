/* main.c - sotto-mic: dictate into a terminal from a microphone (or a WAV
 * file) through sotto-server. See mic.h. */
#define _POSIX_C_SOURCE 200809L
#include "log.h"
#include "mic.h"

#include <errno.h>
#include <getopt.h>
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

/* A number in lo..hi, or exit 2 naming the option. */
static double num(const char *opt, const char *v, double lo, double hi) {
    char *end;
    errno = 0;
    double d = strtod(v, &end);
    if (errno || end == v || *end || !(d >= lo && d <= hi)) {
        fprintf(stderr, "sotto-mic: bad value '%s' for --%s (a number in %g..%g)\n", v, opt, lo, hi);
        exit(2);
    }
    return d;
}

int main(int argc, char **argv) {
    mic_link_opts lo = {"ws://127.0.0.1:8765/v1/stream", 0, NULL, NULL, NULL, NULL, 0, 0, 20};
    mic_source_opts so = {NULL, -1, 1.0, 0, &g_interrupt, NULL};
    int list = 0;
    sotto_log_set_level(SOTTO_LOG_WARN);
    enum {
        OPT_LIST = 1, OPT_INSECURE, OPT_QUIET, OPT_SERVER, OPT_DEVICE, OPT_FILE, OPT_SPEED,
        OPT_OUTPUT, OPT_WEIGHTS, OPT_LANGUAGE, OPT_TASK, OPT_BITRATE, OPT_RECONNECTS,
        OPT_DROP, OPT_LOG_LEVEL
    };
    static const struct option longopts[] = {
        {"list-devices", no_argument, NULL, OPT_LIST},
        {"insecure", no_argument, NULL, OPT_INSECURE},
        {"quiet", no_argument, NULL, OPT_QUIET},
        {"server", required_argument, NULL, OPT_SERVER},
        {"device", required_argument, NULL, OPT_DEVICE},
        {"file", required_argument, NULL, OPT_FILE},
        {"speed", required_argument, NULL, OPT_SPEED},
        {"output", required_argument, NULL, OPT_OUTPUT},
        {"weights", required_argument, NULL, OPT_WEIGHTS},
        {"language", required_argument, NULL, OPT_LANGUAGE},
        {"task", required_argument, NULL, OPT_TASK},
        {"bitrate", required_argument, NULL, OPT_BITRATE},
        {"reconnects", required_argument, NULL, OPT_RECONNECTS},
        {"test-drop-after", required_argument, NULL, OPT_DROP},
        {"log-level", required_argument, NULL, OPT_LOG_LEVEL},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0}};
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
        const char *v = optarg;
        switch (c) {
        case 'h': usage(stdout); return 0;
        case OPT_LIST: list = 1; break;
        case OPT_INSECURE: lo.insecure = 1; break;
        case OPT_QUIET: lo.quiet = 1; break;
        case OPT_SERVER: lo.url = v; break;
        case OPT_DEVICE:
            if (v[0] && strspn(v, "0123456789") == strlen(v))
                so.device = (int)num("device", v, 0, 100000);
            else
                so.device_name = v;
            break;
        case OPT_FILE: so.file = v; break;
        case OPT_SPEED: so.speed = num("speed", v, 1e-3, 1000); break;
        case OPT_OUTPUT: lo.output = v; break;
        case OPT_WEIGHTS: lo.weights = v; break;
        case OPT_LANGUAGE: lo.language = v; break;
        case OPT_TASK: lo.task = v; break;
        case OPT_BITRATE: so.bitrate = (int)num("bitrate", v, 0, 512000); break;
        case OPT_RECONNECTS: lo.max_reconnects = (int)num("reconnects", v, 0, 1000000); break;
        case OPT_DROP: lo.drop_after_s = num("test-drop-after", v, 0, 1e6); break;
        case OPT_LOG_LEVEL: {
            const char *names[] = {"debug", "info", "warn", "error"};
            int k = 0;
            while (k < 4 && strcmp(v, names[k])) k++;
            if (k == 4) {
                fprintf(stderr, "sotto-mic: unknown log level '%s'\n", v);
                return 2;
            }
            sotto_log_set_level((sotto_log_level)k);
            break;
        }
        case ':':
            fprintf(stderr, "sotto-mic: %s needs a value\n", argv[optind - 1]);
            return 2;
        default:
            if (optopt)
                fprintf(stderr, "sotto-mic: unknown option '-%c'\n", optopt);
            else
                fprintf(stderr, "sotto-mic: unknown option '%s'\n", argv[optind - 1]);
            usage(stderr);
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "sotto-mic: unexpected argument '%s' (a WAV file goes after --file)\n",
                argv[optind]);
        return 2;
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
