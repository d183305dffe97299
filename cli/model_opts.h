/* model_opts.h - the options every `sotto` subcommand that loads a model
 * shares, parsed with getopt_long so that options may come before or after
 * the files, `--` ends them and every unknown option or bad value is
 * rejected with the option named:
 *
 *   --model DIR  --weights F  --policy P  --device D  --threads N
 *   --nf4-double-quant  --scale-search  --calib FILE
 *
 * A subcommand puts CLI_MODEL_LONGOPTS into its own `struct option` table
 * (next to its own options, whose codes must stay below CLI_OPT_BASE) and
 * passes every code getopt_long returns to cli_model_opt() first.
 * Strings in cli_model_opts point into argv (no ownership). */
#ifndef SOTTO_CLI_MODEL_OPTS_H
#define SOTTO_CLI_MODEL_OPTS_H

#include "whisper.h"

#include <getopt.h>
#include <stdio.h>

enum {
    CLI_OPT_BASE = 0x1000,
    CLI_OPT_MODEL = CLI_OPT_BASE,
    CLI_OPT_WEIGHTS,
    CLI_OPT_POLICY,
    CLI_OPT_DEVICE,
    CLI_OPT_THREADS,
    CLI_OPT_NF4_DQ,
    CLI_OPT_SCALE_SEARCH,
    CLI_OPT_CALIB
};

#define CLI_MODEL_LONGOPTS                                                                  \
    {"model", required_argument, NULL, CLI_OPT_MODEL},                                      \
        {"weights", required_argument, NULL, CLI_OPT_WEIGHTS},                              \
        {"policy", required_argument, NULL, CLI_OPT_POLICY},                                \
        {"device", required_argument, NULL, CLI_OPT_DEVICE},                                \
        {"threads", required_argument, NULL, CLI_OPT_THREADS},                              \
        {"nf4-double-quant", no_argument, NULL, CLI_OPT_NF4_DQ},                            \
        {"scale-search", no_argument, NULL, CLI_OPT_SCALE_SEARCH},                          \
        {"calib", required_argument, NULL, CLI_OPT_CALIB}

typedef struct cli_model_opts {
    const char *model;     /* directory (default: sotto_cli_default_model()) */
    sotto_model_params mp; /* weights, policy, device, 4-bit options */
    int threads;           /* CPU threads; 0: all cores */
} cli_model_opts;

void cli_model_opts_init(cli_model_opts *o);

/* Handles one getopt_long code. Returns 1 if it was a model option and its
 * value is good, 0 if the code is not a model option, -1 on a bad value
 * (the message, naming prog and the option, is on stderr). */
int cli_model_opt(int code, const char *arg, cli_model_opts *o, const char *prog);

/* The message for getopt_long's '?' (unknown option) or ':' (missing value)
 * with optstring starting with ':', naming the option; always returns -1. */
int cli_opt_error(int code, int argc, char **argv, const char *prog);

/* One help line per shared option, for usage texts. */
void cli_model_opts_usage(FILE *f);

#endif
