/* cmd_mel.c - `sotto mel`: log-mel spectrogram of a WAV file to a raw file.
 *
 * Output: little-endian int32 n_mels, int32 n_frames, then n_mels * n_frames
 * float32 values, row-major [n_mels][n_frames]. */
#include "audio.h"
#include "mel.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int sotto_cmd_mel(int argc, char **argv);

static void mel_usage(FILE *fp) {
    fprintf(fp, "usage: sotto mel [--n-mels N] [--pad N] [--threads N] FILE.wav OUT.f32\n"
                "(options may come after the files; -- ends them)\n"
                "  --n-mels N   mel bins (80 or 128; default 80)\n"
                "  --pad N      zero samples appended before the STFT (default 160;\n"
                "               480000 = OpenAI Whisper's 30 s padding)\n"
                "  --threads N  threads (default 0 = all)\n"
                "Writes int32 n_mels, int32 n_frames, then float32 [n_mels][n_frames],\n"
                "all little-endian.\n");
}

static int parse_long(const char *opt, const char *s, long lo, long hi, long *out) {
    char *end = NULL;
    errno = 0;
    long v = s ? strtol(s, &end, 10) : 0;
    if (!s || errno || end == s || *end || v < lo || v > hi) {
        fprintf(stderr, "sotto mel: %s needs an integer in %ld..%ld\n", opt, lo, hi);
        return -1;
    }
    *out = v;
    return 0;
}

static void put_le32(unsigned char *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i) & 0xFF);
}

static int write_mel(const char *path, const float *m, int n_mels, size_t n_frames) {
    FILE *fp = fopen(path, "wb");
    if (!fp) {
        fprintf(stderr, "sotto mel: %s: cannot create: %s\n", path, strerror(errno));
        return -1;
    }
    unsigned char buf[4096];
    put_le32(buf, (uint32_t)n_mels);
    put_le32(buf + 4, (uint32_t)n_frames);
    int ok = fwrite(buf, 1, 8, fp) == 8;
    size_t total = (size_t)n_mels * n_frames;
    for (size_t i = 0; ok && i < total;) {
        size_t k = 0;
        for (; k < sizeof buf / 4 && i < total; k++, i++) {
            uint32_t u;
            memcpy(&u, &m[i], sizeof u);
            put_le32(buf + 4 * k, u);
        }
        ok = fwrite(buf, 4, k, fp) == k;
    }
    if (fclose(fp) != 0) ok = 0;
    if (!ok) {
        fprintf(stderr, "sotto mel: %s: write failed\n", path);
        remove(path);
        return -1;
    }
    return 0;
}

int sotto_cmd_mel(int argc, char **argv) {
    enum { OPT_N_MELS = 1, OPT_PAD, OPT_THREADS };
    static const struct option longopts[] = {{"n-mels", required_argument, NULL, OPT_N_MELS},
                                             {"pad", required_argument, NULL, OPT_PAD},
                                             {"threads", required_argument, NULL, OPT_THREADS},
                                             {"help", no_argument, NULL, 'h'},
                                             {NULL, 0, NULL, 0}};
    long n_mels = 80, pad = 160, threads = 0;
    optind = 1;
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
        int r = 0;
        switch (c) {
        case 'h': mel_usage(stdout); return 0;
        case OPT_N_MELS: r = parse_long("--n-mels", optarg, 1, 256, &n_mels); break;
        case OPT_PAD: r = parse_long("--pad", optarg, 0, 100000000, &pad); break;
        case OPT_THREADS: r = parse_long("--threads", optarg, 0, 1024, &threads); break;
        case ':':
            fprintf(stderr, "sotto mel: option '%s' needs a value\n", argv[optind - 1]);
            return 2;
        default:
            if (optopt)
                fprintf(stderr, "sotto mel: unknown option '-%c'\n", optopt);
            else
                fprintf(stderr, "sotto mel: unknown option '%s'\n", argv[optind - 1]);
            return 2;
        }
        if (r != 0) return 2;
    }
    if (argc - optind != 2) {
        if (argc - optind > 2) fprintf(stderr, "sotto mel: too many arguments\n");
        mel_usage(stderr);
        return 2;
    }
    const char *pos[2] = {argv[optind], argv[optind + 1]};
    sotto_err err;
    sotto_err_clear(&err);
    sotto_audio audio = {0};
    sotto_mel *mel = NULL;
    float *m = NULL;
    size_t n_frames = 0;
    int rc = 1;
    if (sotto_audio_load_16k(pos[0], &audio, &err) != SOTTO_OK) goto done;
    mel = sotto_mel_create((int)n_mels, &err);
    if (!mel) goto done;
    if (sotto_mel_compute(mel, audio.samples, audio.n, (size_t)pad, (int)threads, &m, &n_frames,
                          &err) != SOTTO_OK)
        goto done;
    if (n_frames > INT32_MAX) {
        fprintf(stderr, "sotto mel: %s: too many frames (%zu)\n", pos[0], n_frames);
        goto done;
    }
    if (write_mel(pos[1], m, (int)n_mels, n_frames) == 0) rc = 0;
done:
    if (err.code != SOTTO_OK) fprintf(stderr, "sotto mel: %s\n", err.msg);
    free(m);
    sotto_mel_free(mel);
    sotto_audio_free(&audio);
    return rc;
}
