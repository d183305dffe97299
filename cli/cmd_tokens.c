/* cmd_tokens.c - `sotto tokens`: inspect a model's tokenizer.
 *
 *   sotto tokens --model DIR encode        all of stdin as one UTF-8 text ->
 *                                          ids, space-separated, on one line
 *   sotto tokens --model DIR decode ID...  ids -> decoded text (specials skipped)
 *   sotto tokens --model DIR id TOKEN      token string (e.g. "<|en|>") -> id
 *
 * Exit status: 0 on success, 1 on a runtime error (bad model, unknown token,
 * invalid UTF-8), 2 on a usage error. Messages go to stderr.
 */
#include "tokenizer.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int sotto_cmd_tokens(int argc, char **argv);

static void tokens_usage(FILE *f) {
    fprintf(f, "usage: sotto tokens --model DIR encode          (text on stdin)\n"
               "       sotto tokens --model DIR decode ID...\n"
               "       sotto tokens --model DIR id TOKEN\n"
               "(options may come anywhere; -- ends them, e.g. before a token such as -)\n");
}

/* Reads all of stdin into a malloc'd buffer; NULL on failure. */
static char *tokens_read_stdin(size_t *len) {
    size_t cap = 65536, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        size_t got = fread(buf + n, 1, cap - n, stdin);
        n += got;
        if (got == 0) break;
        if (n == cap) {
            char *nb = cap * 2 > cap ? realloc(buf, cap * 2) : NULL;
            if (!nb) free(buf);
            buf = nb;
            cap *= 2;
        }
    }
    if (buf && ferror(stdin)) {
        free(buf);
        buf = NULL;
    }
    *len = n;
    return buf;
}

static int tokens_encode(const sotto_tokenizer *tok) {
    size_t len = 0, n = 0;
    char *text = tokens_read_stdin(&len);
    if (!text) {
        fprintf(stderr, "sotto tokens: cannot read stdin\n");
        return 1;
    }
    /* Every id covers at least one byte, so len + 1 ids always suffice. */
    int32_t *ids = malloc((len + 1) * sizeof *ids);
    sotto_err err = {0};
    int rc = ids ? sotto_tokenizer_encode(tok, text, len, ids, len + 1, &n, &err) : SOTTO_E_NOMEM;
    if (rc == SOTTO_OK) {
        for (size_t i = 0; i < n; i++) printf(i ? " %d" : "%d", (int)ids[i]);
        printf("\n");
    } else {
        fprintf(stderr, "sotto tokens: %s\n", ids ? err.msg : "out of memory");
    }
    free(ids);
    free(text);
    return rc == SOTTO_OK ? 0 : 1;
}

static int tokens_decode(const sotto_tokenizer *tok, int n, char **args) {
    int32_t *ids = malloc((size_t)(n > 0 ? n : 1) * sizeof *ids);
    if (!ids) {
        fprintf(stderr, "sotto tokens: out of memory\n");
        return 1;
    }
    for (int i = 0; i < n; i++) {
        char *end = NULL;
        errno = 0;
        long v = strtol(args[i], &end, 10);
        if (errno || end == args[i] || *end != '\0' || v < INT32_MIN || v > INT32_MAX) {
            fprintf(stderr, "sotto tokens: not an id: \"%s\"\n", args[i]);
            free(ids);
            return 2;
        }
        ids[i] = (int32_t)v;
    }
    sotto_err err = {0};
    char *text = sotto_tokenizer_decode(tok, ids, (size_t)n, &err);
    free(ids);
    if (!text) {
        fprintf(stderr, "sotto tokens: %s\n", err.msg);
        return 1;
    }
    fwrite(text, 1, strlen(text), stdout);
    fputc('\n', stdout);
    free(text);
    return 0;
}

static int tokens_id(const sotto_tokenizer *tok, const char *token) {
    int32_t id = sotto_tokenizer_token_id(tok, token);
    if (id < 0) {
        fprintf(stderr, "sotto tokens: unknown token \"%s\"\n", token);
        return 1;
    }
    printf("%d\n", (int)id);
    return 0;
}

int sotto_cmd_tokens(int argc, char **argv) {
    static const struct option longopts[] = {{"model", required_argument, NULL, 'm'},
                                             {"help", no_argument, NULL, 'h'},
                                             {NULL, 0, NULL, 0}};
    const char *model = NULL;
    optind = 1;
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, ":hm:", longopts, NULL)) != -1) {
        if (c == 'h') {
            tokens_usage(stdout);
            return 0;
        } else if (c == 'm') {
            model = optarg;
        } else {
            if (c == ':')
                fprintf(stderr, "sotto tokens: option '%s' needs a value\n", argv[optind - 1]);
            else if (optopt)
                fprintf(stderr, "sotto tokens: unknown option '-%c'\n", optopt);
            else
                fprintf(stderr, "sotto tokens: unknown option '%s'\n", argv[optind - 1]);
            tokens_usage(stderr);
            return 2;
        }
    }
    int i = optind;
    const char *cmd = i < argc ? argv[i++] : NULL;
    int ok_args = cmd && ((strcmp(cmd, "encode") == 0 && i == argc) ||
                          strcmp(cmd, "decode") == 0 || (strcmp(cmd, "id") == 0 && i + 1 == argc));
    if (!model || !ok_args) {
        tokens_usage(stderr);
        return 2;
    }
    sotto_err err = {0};
    sotto_tokenizer *tok = sotto_tokenizer_load_dir(model, &err);
    if (!tok) {
        fprintf(stderr, "sotto tokens: %s\n", err.msg);
        return 1;
    }
    int rc;
    if (strcmp(cmd, "encode") == 0)
        rc = tokens_encode(tok);
    else if (strcmp(cmd, "decode") == 0)
        rc = tokens_decode(tok, argc - i, argv + i);
    else
        rc = tokens_id(tok, argv[i]);
    sotto_tokenizer_free(tok);
    return rc;
}
