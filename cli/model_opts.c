/* model_opts.c - the model options shared by `sotto` subcommands (see model_opts.h). */
#define _POSIX_C_SOURCE 200809L
#include "model_opts.h"

#include "commands.h"

#include <stdlib.h>
#include <string.h>

void cli_model_opts_init(cli_model_opts *o) {
    o->model = sotto_cli_default_model();
    o->mp = sotto_model_default_params();
    o->threads = 0;
}

static int bad(const char *prog, const char *opt, const char *arg, const char *why) {
    fprintf(stderr, "sotto %s: bad value '%s' for --%s (%s)\n", prog, arg, opt, why);
    return -1;
}

int cli_model_opt(int code, const char *arg, cli_model_opts *o, const char *prog) {
    switch (code) {
    case CLI_OPT_MODEL:
        o->model = arg;
        return 1;
    case CLI_OPT_WEIGHTS:
        if (sotto_wfmt_parse(arg, &o->mp.weights))
            return bad(prog, "weights", arg, "f32, f16, bf16, q8, nf4 or nvfp4");
        return 1;
    case CLI_OPT_POLICY:
        o->mp.policy = arg;
        return 1;
    case CLI_OPT_DEVICE:
        if (sotto_device_parse(arg, &o->mp.device)) return bad(prog, "device", arg, "cpu, auto or cuda");
        return 1;
    case CLI_OPT_THREADS: {
        char *end;
        long v = strtol(arg, &end, 10);
        if (end == arg || *end || v < 0 || v > 1024) return bad(prog, "threads", arg, "0..1024");
        o->threads = (int)v;
        return 1;
    }
    case CLI_OPT_NF4_DQ:
        o->mp.nf4_double_quant = 1;
        return 1;
    case CLI_OPT_SCALE_SEARCH:
        o->mp.scale_search = 1;
        return 1;
    case CLI_OPT_CALIB:
        o->mp.calib = arg;
        return 1;
    default:
        return 0;
    }
}

int cli_opt_error(int code, int argc, char **argv, const char *prog) {
    /* getopt_long has already advanced optind past the offending element */
    const char *el = optind - 1 >= 1 && optind - 1 < argc ? argv[optind - 1] : "?";
    if (code == ':')
        fprintf(stderr, "sotto %s: option '%s' needs a value\n", prog, el);
    else if (optopt && strlen(el) == 2)
        fprintf(stderr, "sotto %s: unknown option '-%c'\n", prog, optopt);
    else if (optopt)
        fprintf(stderr, "sotto %s: unknown option '-%c' (in '%s')\n", prog, optopt, el);
    else
        fprintf(stderr, "sotto %s: unknown option '%s'\n", prog, el);
    return -1;
}

void cli_model_opts_usage(FILE *f) {
    fprintf(f,
            "  --model DIR            model directory (default: %s)\n"
            "  --weights F            f32 | f16 | bf16 | q8 | nf4 | nvfp4 (quantized while\n"
            "                         loading; default: the checkpoint's own precision, f16 for\n"
            "                         a float16 CTranslate2 model, else f32: both transcribe\n"
            "                         alike; a snapshot from `sotto quantize` keeps its own)\n"
            "  --policy P             per-part formats: a preset (default: 4-bit keeps the parts\n"
            "                         measured to need 8 bits at q8; uniform: every linear\n"
            "                         layer in F) and/or part=format items, e.g.\n"
            "                         uniform,decoder=q8 or encoder=nvfp4,embed=bf16; per\n"
            "                         layer (from 0): encoder.0=q8, decoder.3.cross=bf16\n"
            "  --nf4-double-quant     store NF4 block scales as 8-bit codes (bitsandbytes)\n"
            "  --scale-search         4-bit block scales by least squared error, not absmax\n"
            "  --calib FILE           weight that error by activations recorded with\n"
            "                         `sotto calibrate` (implies --scale-search)\n"
            "  --device D             cpu | auto | cuda (default auto for transcribe, cpu for\n"
            "                         the other commands; auto uses a GPU when one is usable,\n"
            "                         else the CPU, and says why in one line)\n"
            "  --threads N            CPU threads (default: all cores)\n",
            sotto_cli_default_model());
}
