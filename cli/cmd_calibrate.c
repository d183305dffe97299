/* cmd_calibrate.c - `sotto calibrate`: records the activation statistics
 * that weight the 4-bit quantizers' error (include/calib.h). */
#include "audio.h"
#include "calib.h"
#include "commands.h"
#include "model_opts.h"
#include "mapfile.h"
#include "threads.h"
#include "transcribe.h"
#include "whisper.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

static void usage(FILE *f) {
    fprintf(f,
            "usage: sotto calibrate [--model DIR] [--device D] [--threads N] -o FILE CLIP.wav ...\n"
            "(options may come after the clips; -- ends them)\n"
            "\n"
            "Transcribes each CLIP with the float32 model (sotto's default decoding) and\n"
            "writes FILE: for every linear layer, the mean square of each input column\n"
            "over all the clips, and the clips' names, sizes and CRC-32s. Load a model\n"
            "with --calib FILE to choose its 4-bit block scales by that weighted error.\n"
            "Calibrate on audio that is not in the set you evaluate on: bench_quant.py\n"
            "refuses to run when they overlap.\n");
}

/* Size and CRC-32 of a file's bytes. */
static int file_crc(const char *path, size_t *bytes, uint32_t *crc, sotto_err *err) {
    char *data = NULL;
    size_t len = 0;
    int rc = sotto_read_file(path, (size_t)1 << 31, &data, &len, err);
    if (rc) return rc;
    uLong c = crc32(0L, Z_NULL, 0);
    for (size_t off = 0; off < len;) {
        uInt chunk = len - off > (1u << 30) ? (1u << 30) : (uInt)(len - off);
        c = crc32(c, (const Bytef *)data + off, chunk);
        off += chunk;
    }
    free(data);
    *bytes = len;
    *crc = (uint32_t)c;
    return SOTTO_OK;
}

static int calibrate_clip(const sotto_model *m, sotto_calib_rec *rec, const char *path,
                          sotto_err *err) {
    size_t bytes;
    uint32_t crc;
    int rc = file_crc(path, &bytes, &crc, err);
    if (rc) return rc;
    sotto_audio a;
    if ((rc = sotto_audio_load_16k(path, &a, err))) return rc;
    sotto_transcribe_opts o = sotto_transcribe_default_opts();
    sotto_transcript t;
    memset(&t, 0, sizeof t);
    rc = sotto_transcribe(m, a.samples, a.n, &o, &t, err);
    if (rc == 0) {
        fprintf(stderr, "%s (%.1f s):", path, (double)a.n / 16000.0);
        for (int i = 0; i < t.n_segments; i++) fprintf(stderr, "%s", t.segments[i].text);
        fprintf(stderr, "\n");
        rc = sotto_calib_rec_add_clip(rec, path, bytes, crc, err);
    }
    sotto_transcript_free(&t);
    sotto_audio_free(&a);
    return rc;
}

int sotto_cmd_calibrate(int argc, char **argv) {
    static const struct option longopts[] = {CLI_MODEL_LONGOPTS,
                                             {"output", required_argument, NULL, 'o'},
                                             {"help", no_argument, NULL, 'h'},
                                             {NULL, 0, NULL, 0}};
    cli_model_opts o;
    cli_model_opts_init(&o);
    const char *out = NULL;
    optind = 1;
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, ":ho:", longopts, NULL)) != -1) {
        if (c == CLI_OPT_WEIGHTS || c == CLI_OPT_POLICY || c == CLI_OPT_NF4_DQ ||
            c == CLI_OPT_SCALE_SEARCH || c == CLI_OPT_CALIB) {
            fprintf(stderr, "sotto calibrate: statistics are recorded on the float32 model; "
                            "--weights, --policy, --nf4-double-quant, --scale-search and "
                            "--calib do not apply\n");
            return 2;
        }
        int r = cli_model_opt(c, optarg, &o, "calibrate");
        if (r < 0) return 2;
        if (r > 0) continue;
        if (c == 'h') {
            usage(stdout);
            return 0;
        }
        if (c == 'o') {
            out = optarg;
            continue;
        }
        cli_opt_error(c, argc, argv, "calibrate");
        return 2;
    }
    const char *const *clips = (const char *const *)argv + optind;
    const int n = argc - optind;
    if (!out || n == 0) {
        usage(stderr);
        return 2;
    }
    if (o.threads) sotto_threads_set(o.threads);
    sotto_err err;
    sotto_model_params mp = sotto_model_default_params();
    mp.device = o.mp.device;
    sotto_model *m = sotto_model_load(o.model, &mp, &err);
    if (!m) {
        fprintf(stderr, "sotto calibrate: %s\n", err.msg);
        return 1;
    }
    sotto_calib_rec *rec = sotto_calib_rec_start(m, &err);
    int rc = rec ? SOTTO_OK : err.code;
    for (int i = 0; i < n && rc == 0; i++) rc = calibrate_clip(m, rec, clips[i], &err);
    if (rc == 0) rc = sotto_calib_rec_save(rec, out, &err);
    sotto_calib_rec_free(rec);
    sotto_model_free(m);
    if (rc) {
        fprintf(stderr, "sotto calibrate: %s\n", err.msg);
        return 1;
    }
    printf("wrote %s: statistics of %d clips\n", out, n);
    return 0;
}
