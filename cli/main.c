/* main.c - the `sotto` command-line tool: dispatches to subcommands. */
#define _POSIX_C_SOURCE 200809L
#include "blas_env.h"
#include "commands.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const struct {
    const char *name;
    int (*fn)(int, char **);
    const char *help;
} k_commands[] = {
    {"transcribe", sotto_cmd_transcribe, "transcribe audio files (WAV) to text"},
    {"quantize", sotto_cmd_quantize, "write a pre-quantized snapshot (nf4, nvfp4, q8, bf16)"},
    {"calibrate", sotto_cmd_calibrate, "record activation statistics for 4-bit quantization"},
    {"info", sotto_cmd_info, "print a model's dimensions and special tokens as JSON"},
    {"encode", sotto_cmd_encode, "dump the encoder output of a file's first window"},
    {"mel", sotto_cmd_mel, "dump the log-mel spectrogram of a WAV file"},
    {"tokens", sotto_cmd_tokens, "encode/decode text with a model's tokenizer"},
};

const char *sotto_cli_default_model(void) {
    static char buf[PATH_MAX + 32];
    const char *env = getenv("SOTTO_MODEL");
    if (env && *env) return env;
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = '\0';
        char *slash = strrchr(exe, '/');
        if (slash) {
            *slash = '\0';
            struct stat st;
            snprintf(buf, sizeof buf, "%s/../models/tiny.en", exe);
            if (stat(buf, &st) == 0 && S_ISDIR(st.st_mode)) return buf;
        }
    }
    return "models/tiny.en";
}

static void usage(FILE *f) {
    fprintf(f, "usage: sotto <command> [options]\n\ncommands:\n");
    for (size_t i = 0; i < sizeof k_commands / sizeof k_commands[0]; i++)
        fprintf(f, "  %-11s %s\n", k_commands[i].name, k_commands[i].help);
    fprintf(f, "\n`sotto <command> --help` describes a command's options.\n");
}

int main(int argc, char **argv) {
    sotto_blas_check_coretype(argv);
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
        strcmp(argv[1], "help") == 0) {
        usage(stdout);
        return 0;
    }
    for (size_t i = 0; i < sizeof k_commands / sizeof k_commands[0]; i++)
        if (strcmp(argv[1], k_commands[i].name) == 0) return k_commands[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "sotto: unknown command '%s'\n\n", argv[1]);
    usage(stderr);
    return 2;
}
