/* cmd_tokens.c - `sotto tokens`: inspect a model's tokenizer.
 *
 *   sotto tokens --model DIR encode        all of stdin as one UTF-8 text ->
 *                                          ids, space-separated, on one line
 *   sotto tokens --model DIR decode ID...  ids -> decoded text (specials skipped)
 *   sotto tokens --model DIR id TOKEN      token string (e.g. "<|en|>") -> id
 *
 * With --jsonl, encode and decode take many inputs in one process (the
 * tokenizer loads once): each line of stdin is one JSON value, a string to
 * encode or an array of ids to decode, and each answer is one line of stdout,
 * in input order: the ids as a JSON array, or the text as a JSON string. A
 * line that cannot be read or encoded is answered {"error": "..."} and the
 * others go on; the exit status is then 1.
 *
 * Exit status: 0 on success, 1 on a runtime error (bad model, unknown token,
 * invalid UTF-8, any failed --jsonl line), 2 on a usage error. Messages go to
 * stderr.
 */
#include "sotto_err.h"
#include "tokenizer.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int sotto_cmd_tokens(int argc, char **argv);

static void tokens_usage(FILE *f) {
    fprintf(f, "usage: sotto tokens --model DIR encode          (text on stdin)\n"
               "       sotto tokens --model DIR decode ID...\n"
               "       sotto tokens --model DIR id TOKEN\n"
               "       sotto tokens --model DIR --jsonl encode|decode\n"
               "           (one JSON string, or array of ids, per line of stdin; one JSON answer per line)\n"
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

/* The ids of text[0..len) in a malloc'd array of *n, or NULL with err set.
 * Every id covers at least one byte, so len + 1 ids always suffice. */
static int32_t *encode_ids(const sotto_tokenizer *tok, const char *text, size_t len, size_t *n,
                           sotto_err *err) {
    int32_t *ids = malloc((len + 1) * sizeof *ids);
    if (!ids) {
        sotto_err_set(err, SOTTO_E_NOMEM, "out of memory");
        return NULL;
    }
    if (sotto_tokenizer_encode(tok, text, len, ids, len + 1, n, err) != SOTTO_OK) {
        free(ids);
        return NULL;
    }
    return ids;
}

static int tokens_encode(const sotto_tokenizer *tok) {
    size_t len = 0, n = 0;
    char *text = tokens_read_stdin(&len);
    if (!text) {
        fprintf(stderr, "sotto tokens: cannot read stdin\n");
        return 1;
    }
    sotto_err err = {0};
    int32_t *ids = encode_ids(tok, text, len, &n, &err);
    free(text);
    if (!ids) {
        fprintf(stderr, "sotto tokens: %s\n", err.msg);
        return 1;
    }
    for (size_t i = 0; i < n; i++) printf(i ? " %d" : "%d", (int)ids[i]);
    printf("\n");
    free(ids);
    return 0;
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

/* One --jsonl answer that is an error: {"error": msg}. */
static void jsonl_error(const char *msg) {
    cJSON *o = cJSON_CreateObject();
    char *s = o && cJSON_AddStringToObject(o, "error", msg) ? cJSON_PrintUnformatted(o) : NULL;
    puts(s ? s : "{\"error\": \"out of memory\"}");
    cJSON_free(s);
    cJSON_Delete(o);
}

/* Prints item as one line; 0, or -1 (out of memory, reported on the line). */
static int jsonl_print(cJSON *item) {
    char *s = item ? cJSON_PrintUnformatted(item) : NULL;
    if (!s) {
        jsonl_error("out of memory");
        return -1;
    }
    puts(s);
    cJSON_free(s);
    return 0;
}

/* Whether a JSON text escapes U+0000 (\u0000), which cJSON's C strings would
 * silently cut off. */
static int json_has_nul_escape(const char *p, size_t n) {
    for (size_t i = 0; i + 1 < n; i++) {
        if (p[i] != '\\') continue;
        if (p[i + 1] == 'u' && i + 5 < n && memcmp(p + i + 2, "0000", 4) == 0) return 1;
        i++; /* skip the escaped character (a second backslash included) */
    }
    return 0;
}

/* Encodes the JSON string on one line; 0, or -1 after an error line. */
static int jsonl_encode_line(const sotto_tokenizer *tok, const cJSON *v) {
    if (!cJSON_IsString(v)) {
        jsonl_error("encode --jsonl: each line must be one JSON string");
        return -1;
    }
    size_t n = 0;
    sotto_err err = {0};
    int32_t *ids = encode_ids(tok, v->valuestring, strlen(v->valuestring), &n, &err);
    if (!ids) {
        jsonl_error(err.msg);
        return -1;
    }
    cJSON *arr = cJSON_CreateArray();
    for (size_t i = 0; arr && i < n; i++) {
        cJSON *x = cJSON_CreateNumber(ids[i]);
        if (!x || !cJSON_AddItemToArray(arr, x)) {
            cJSON_Delete(x);
            cJSON_Delete(arr);
            arr = NULL;
        }
    }
    free(ids);
    int rc = jsonl_print(arr);
    cJSON_Delete(arr);
    return rc;
}

/* Decodes the JSON array of ids on one line; 0, or -1 after an error line. */
static int jsonl_decode_line(const sotto_tokenizer *tok, const cJSON *v) {
    int n = cJSON_IsArray(v) ? cJSON_GetArraySize(v) : -1;
    if (n < 0) {
        jsonl_error("decode --jsonl: each line must be one JSON array of ids");
        return -1;
    }
    int32_t *ids = malloc((size_t)(n > 0 ? n : 1) * sizeof *ids);
    if (!ids) {
        jsonl_error("out of memory");
        return -1;
    }
    int i = 0;
    for (const cJSON *x = v->child; x; x = x->next, i++) {
        double d = cJSON_IsNumber(x) ? x->valuedouble : 0.5;
        /* not a number, not whole, or out of int32's range (checked before the cast,
         * which would be undefined behaviour out of range) */
        if (!(d >= INT32_MIN && d <= INT32_MAX) || d != floor(d)) {
            free(ids);
            jsonl_error("decode --jsonl: every id must be an integer");
            return -1;
        }
        ids[i] = (int32_t)d;
    }
    sotto_err err = {0};
    char *text = sotto_tokenizer_decode(tok, ids, (size_t)n, &err);
    free(ids);
    if (!text) {
        jsonl_error(err.msg);
        return -1;
    }
    cJSON *s = cJSON_CreateString(text);
    free(text);
    int rc = jsonl_print(s);
    cJSON_Delete(s);
    return rc;
}

/* --jsonl: one JSON value per line of stdin, one answer per line of stdout. */
static int tokens_jsonl(const sotto_tokenizer *tok, int encode) {
    size_t len = 0;
    char *all = tokens_read_stdin(&len);
    if (!all) {
        fprintf(stderr, "sotto tokens: cannot read stdin\n");
        return 1;
    }
    int failed = 0;
    for (size_t at = 0; at < len;) {
        char *line = all + at, *nl = memchr(line, '\n', len - at);
        size_t n = nl ? (size_t)(nl - line) : len - at;
        at += n + (nl != NULL);
        if (encode && json_has_nul_escape(line, n)) {
            jsonl_error("encode --jsonl: a text cannot hold U+0000 here (plain encode reads it)");
            failed = 1;
            continue;
        }
        cJSON *v = cJSON_ParseWithLength(line, n);
        if (!v) {
            jsonl_error("not a JSON value");
            failed = 1;
            continue;
        }
        if ((encode ? jsonl_encode_line(tok, v) : jsonl_decode_line(tok, v)) != 0) failed = 1;
        cJSON_Delete(v);
    }
    free(all);
    if (fflush(stdout) != 0 || ferror(stdout)) {
        fprintf(stderr, "sotto tokens: cannot write stdout\n");
        return 1;
    }
    return failed;
}

int sotto_cmd_tokens(int argc, char **argv) {
    static const struct option longopts[] = {{"model", required_argument, NULL, 'm'},
                                             {"help", no_argument, NULL, 'h'},
                                             {"jsonl", no_argument, NULL, 'j'},
                                             {NULL, 0, NULL, 0}};
    const char *model = NULL;
    int jsonl = 0;
    optind = 1;
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, ":hm:", longopts, NULL)) != -1) {
        if (c == 'h') {
            tokens_usage(stdout);
            return 0;
        } else if (c == 'm') {
            model = optarg;
        } else if (c == 'j') {
            jsonl = 1;
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
    if (jsonl) /* the inputs come on stdin, not as arguments */
        ok_args = cmd && (strcmp(cmd, "encode") == 0 || strcmp(cmd, "decode") == 0) && i == argc;
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
    if (jsonl)
        rc = tokens_jsonl(tok, strcmp(cmd, "encode") == 0);
    else if (strcmp(cmd, "encode") == 0)
        rc = tokens_encode(tok);
    else if (strcmp(cmd, "decode") == 0)
        rc = tokens_decode(tok, argc - i, argv + i);
    else
        rc = tokens_id(tok, argv[i]);
    sotto_tokenizer_free(tok);
    return rc;
}
