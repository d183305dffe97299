/* tokenizer_load.c - reads a model directory's tokenizer files (see
 * tokenizer.h for the order of preference) into a sotto_tokenizer.
 *
 * Every loader collects (id, string, special) entries into the tokenizer's
 * arena, builds the vocabulary tables, then adds the merge rules. Any file
 * that exists but cannot be parsed is an error naming that file: there is no
 * silent fallback to the next kind of file.
 */
#define _POSIX_C_SOURCE 200809L
#include "tokenizer_internal.h"

#include "mapfile.h"

#include <cjson/cJSON.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define TOK_MAX_FILE ((size_t)1 << 30)
#define TOK_PATH_MAX 4096

typedef struct entry_list {
    sotto_tok_entry *v;
    size_t n, cap;
} entry_list;

/* 1 for strings spelled "<|...|>", which Whisper uses for control tokens. */
static int is_angle_token(const char *s, size_t len) {
    return len >= 4 && s[0] == '<' && s[1] == '|' && s[len - 2] == '|' && s[len - 1] == '>';
}

/* Stores s[0..len) in the arena and appends an entry for it. */
static int entries_push(sotto_tokenizer *tok, entry_list *l, int32_t id, const char *s,
                        size_t len, int special) {
    if (len >= UINT32_MAX) return SOTTO_E_RANGE;
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 1024;
        sotto_tok_entry *v = realloc(l->v, cap * sizeof *v);
        if (!v) return SOTTO_E_NOMEM;
        l->v = v;
        l->cap = cap;
    }
    sotto_tok_entry *e = &l->v[l->n];
    int rc = sotto_tok_arena_add(tok, s, len, 1, &e->off);
    if (rc != SOTTO_OK) return rc;
    e->id = id;
    e->len = (uint32_t)len;
    e->special = (uint8_t)(special != 0);
    l->n++;
    return SOTTO_OK;
}

static int32_t entries_max_id(const entry_list *l) {
    int32_t m = -1;
    for (size_t i = 0; i < l->n; i++)
        if (l->v[i].id > m) m = l->v[i].id;
    return m;
}

/* Reads and parses a JSON file; the error names the file and the byte offset. */
static int load_json(const char *path, cJSON **out, sotto_err *err) {
    char *buf = NULL;
    size_t len = 0;
    *out = NULL;
    int rc = sotto_read_file(path, TOK_MAX_FILE, &buf, &len, err);
    if (rc != SOTTO_OK) return rc;
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(buf, len, &end, 0);
    if (!root) {
        size_t at = end && end >= buf && end <= buf + len ? (size_t)(end - buf) : len;
        rc = sotto_err_set(err, SOTTO_E_FORMAT,
                           "%s: invalid JSON near byte %zu of %zu (truncated or corrupt file?)",
                           path, at, len);
    }
    free(buf);
    *out = root;
    return root ? SOTTO_OK : rc;
}

/* Token id from a JSON number: an integer in [0, SOTTO_TOK_MAX_ID). */
static int json_id(const cJSON *item, int32_t *id) {
    if (!cJSON_IsNumber(item)) return 0;
    double d = item->valuedouble;
    if (!(d >= 0 && d < SOTTO_TOK_MAX_ID) || d != (double)(int32_t)d) return 0;
    *id = (int32_t)d;
    return 1;
}

/* Entries from a JSON object {"token": id, ...}. */
static int push_vocab_object(sotto_tokenizer *tok, entry_list *l, const cJSON *obj,
                             int angle_special, const char *path, const char *field,
                             sotto_err *err) {
    if (!cJSON_IsObject(obj))
        return sotto_err_set(err, SOTTO_E_FORMAT, "%s: %s is not an object", path, field);
    const cJSON *item;
    cJSON_ArrayForEach(item, obj) {
        int32_t id;
        if (!item->string || !json_id(item, &id))
            return sotto_err_set(err, SOTTO_E_FORMAT, "%s: %s: bad id for token \"%.80s\"",
                                 path, field, item->string ? item->string : "");
        size_t len = strlen(item->string);
        int special = angle_special && is_angle_token(item->string, len);
        int rc = entries_push(tok, l, id, item->string, len, special);
        if (rc != SOTTO_OK) return sotto_err_set(err, rc, "%s: %s", path, sotto_strerror(rc));
    }
    return SOTTO_OK;
}

/* One added token {"id": N, "content": "...", "special": bool}; with
 * key_id >= 0 the id comes from the key (tokenizer_config.json style). */
static int push_added_token(sotto_tokenizer *tok, entry_list *l, const cJSON *obj,
                            int32_t key_id, const char *path, sotto_err *err) {
    const cJSON *content = cJSON_GetObjectItemCaseSensitive(obj, "content");
    int32_t id = key_id;
    if (!cJSON_IsString(content) || (id < 0 && !json_id(cJSON_GetObjectItemCaseSensitive(obj, "id"), &id)))
        return sotto_err_set(err, SOTTO_E_FORMAT, "%s: malformed added token", path);
    size_t len = strlen(content->valuestring);
    int special = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(obj, "special")) ||
                  is_angle_token(content->valuestring, len);
    int rc = entries_push(tok, l, id, content->valuestring, len, special);
    return rc == SOTTO_OK ? rc : sotto_err_set(err, rc, "%s: %s", path, sotto_strerror(rc));
}

/* Splits "a b" at its only space (as HF does for string merges). */
static int split_merge(const char *s, size_t *alen, const char **b) {
    const char *sp = strchr(s, ' ');
    if (!sp || sp == s || sp[1] == '\0' || strchr(sp + 1, ' ')) return 0;
    *alen = (size_t)(sp - s);
    *b = sp + 1;
    return 1;
}

static int add_json_merges(sotto_tokenizer *tok, const cJSON *merges, const char *path,
                           sotto_err *err) {
    if (!cJSON_IsArray(merges))
        return sotto_err_set(err, SOTTO_E_FORMAT, "%s: model.merges is missing or not an array",
                             path);
    int rc = sotto_tok_reserve_merges(tok, (size_t)cJSON_GetArraySize(merges), err);
    if (rc != SOTTO_OK) return rc;
    int32_t rank = 0;
    const cJSON *m;
    cJSON_ArrayForEach(m, merges) {
        const char *a = NULL, *b = NULL;
        size_t alen = 0;
        if (cJSON_IsString(m) && split_merge(m->valuestring, &alen, &b)) {
            a = m->valuestring;
        } else if (cJSON_IsArray(m) && cJSON_GetArraySize(m) == 2 &&
                   cJSON_IsString(m->child) && cJSON_IsString(m->child->next)) {
            a = m->child->valuestring;
            alen = strlen(a);
            b = m->child->next->valuestring;
        } else {
            return sotto_err_set(err, SOTTO_E_FORMAT, "%s: merge %d is malformed", path,
                                 (int)rank);
        }
        rc = sotto_tok_add_merge(tok, a, alen, b, strlen(b), rank++, path, err);
        if (rc != SOTTO_OK) return rc;
    }
    return SOTTO_OK;
}

/* CTranslate2 vocabulary: vocabulary.txt (one token per line) or
 * vocabulary.json (array of strings), token i having id i. Only ids >= min_id
 * are added; "<|...|>" tokens are special. *found = 0 if neither file exists. */
static int push_vocabulary_file(sotto_tokenizer *tok, entry_list *l, const char *dir,
                                int32_t min_id, int *found, sotto_err *err) {
    char path[TOK_PATH_MAX];
    char *buf = NULL;
    cJSON *root = NULL;
    int rc = SOTTO_OK;
    *found = 1;
    if (sotto_path_join(path, sizeof path, dir, "vocabulary.txt") == SOTTO_OK &&
        sotto_file_exists(path)) {
        size_t len = 0;
        rc = sotto_read_file(path, TOK_MAX_FILE, &buf, &len, err);
        if (rc != SOTTO_OK) goto done;
        int64_t id = 0;
        for (size_t i = 0; i < len; id++) {
            const char *nl = memchr(buf + i, '\n', len - i);
            size_t end = nl ? (size_t)(nl - buf) : len, n = end - i;
            if (n && buf[i + n - 1] == '\r') n--;
            if (id >= SOTTO_TOK_MAX_ID) {
                rc = sotto_err_set(err, SOTTO_E_FORMAT, "%s: too many lines", path);
                goto done;
            }
            if (id >= min_id) {
                rc = entries_push(tok, l, (int32_t)id, buf + i, n, is_angle_token(buf + i, n));
                if (rc != SOTTO_OK) goto oom;
            }
            i = end + 1;
        }
    } else if (sotto_path_join(path, sizeof path, dir, "vocabulary.json") == SOTTO_OK &&
               sotto_file_exists(path)) {
        rc = load_json(path, &root, err);
        if (rc != SOTTO_OK) goto done;
        if (!cJSON_IsArray(root)) {
            rc = sotto_err_set(err, SOTTO_E_FORMAT, "%s: not an array of strings", path);
            goto done;
        }
        int32_t id = 0;
        const cJSON *item;
        cJSON_ArrayForEach(item, root) {
            if (!cJSON_IsString(item) || id >= SOTTO_TOK_MAX_ID) {
                rc = sotto_err_set(err, SOTTO_E_FORMAT, "%s: entry %d is not a string", path,
                                   (int)id);
                goto done;
            }
            size_t n = strlen(item->valuestring);
            if (id >= min_id) {
                rc = entries_push(tok, l, id, item->valuestring, n,
                                  is_angle_token(item->valuestring, n));
                if (rc != SOTTO_OK) goto oom;
            }
            id++;
        }
    } else {
        *found = 0;
    }
    goto done;
oom:
    rc = sotto_err_set(err, rc, "%s: %s", path, sotto_strerror(rc));
done:
    free(buf);
    cJSON_Delete(root);
    return rc;
}

/* Prefixes err's message with "path: " (for errors raised without one). */
static int err_in_file(sotto_err *err, int rc, const char *path) {
    if (err && strncmp(err->msg, path, strlen(path)) != 0) {
        char msg[SOTTO_ERR_MSG_MAX];
        memcpy(msg, err->msg, sizeof msg);
        sotto_err_set(err, rc, "%s: %s", path, msg);
    }
    return rc;
}

/* Shared tail of both BPE loaders: extra ids from vocabulary.txt, tables. */
static int finish_vocab(sotto_tokenizer *tok, entry_list *l, const char *dir,
                        const char *path, sotto_err *err) {
    int found;
    int rc = push_vocabulary_file(tok, l, dir, entries_max_id(l) + 1, &found, err);
    if (rc != SOTTO_OK) return rc;
    rc = sotto_tok_build_vocab(tok, l->v, l->n, err);
    return rc == SOTTO_OK ? rc : err_in_file(err, rc, path);
}

static int load_tokenizer_json(sotto_tokenizer *tok, const char *dir, const char *path,
                               sotto_err *err) {
    entry_list l = {0};
    cJSON *root = NULL;
    int rc = load_json(path, &root, err);
    if (rc != SOTTO_OK) goto done;
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(model, "type");
    if (!cJSON_IsObject(model)) {
        rc = sotto_err_set(err, SOTTO_E_FORMAT, "%s: no \"model\" object", path);
        goto done;
    }
    if (type && !(cJSON_IsString(type) && strcmp(type->valuestring, "BPE") == 0)) {
        rc = sotto_err_set(err, SOTTO_E_UNSUPPORTED, "%s: model type is not BPE", path);
        goto done;
    }
    rc = push_vocab_object(tok, &l, cJSON_GetObjectItemCaseSensitive(model, "vocab"), 0,
                           path, "model.vocab", err);
    if (rc != SOTTO_OK) goto done;
    const cJSON *added = cJSON_GetObjectItemCaseSensitive(root, "added_tokens");
    const cJSON *item;
    if (added && !cJSON_IsArray(added)) {
        rc = sotto_err_set(err, SOTTO_E_FORMAT, "%s: added_tokens is not an array", path);
        goto done;
    }
    cJSON_ArrayForEach(item, added) {
        rc = push_added_token(tok, &l, item, -1, path, err);
        if (rc != SOTTO_OK) goto done;
    }
    rc = finish_vocab(tok, &l, dir, path, err);
    if (rc != SOTTO_OK) goto done;
    tok->ignore_merges = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(model, "ignore_merges"));
    rc = add_json_merges(tok, cJSON_GetObjectItemCaseSensitive(model, "merges"), path, err);
done:
    free(l.v);
    cJSON_Delete(root);
    return rc;
}

/* Optional JSON file of the vocab.json layout: added_tokens.json (object
 * content -> id) or tokenizer_config.json ("added_tokens_decoder"). */
static int push_optional_added(sotto_tokenizer *tok, entry_list *l, const char *dir,
                               const char *name, sotto_err *err) {
    char path[TOK_PATH_MAX];
    cJSON *root = NULL;
    if (sotto_path_join(path, sizeof path, dir, name) != SOTTO_OK || !sotto_file_exists(path))
        return SOTTO_OK;
    int rc = load_json(path, &root, err);
    if (rc != SOTTO_OK) return rc;
    if (strcmp(name, "added_tokens.json") == 0) {
        rc = push_vocab_object(tok, l, root, 1, path, "added tokens", err);
    } else {
        const cJSON *dec = cJSON_GetObjectItemCaseSensitive(root, "added_tokens_decoder");
        const cJSON *item;
        if (!cJSON_IsObject(dec)) dec = NULL;
        cJSON_ArrayForEach(item, dec) {
            char *end = NULL;
            long id = item->string ? strtol(item->string, &end, 10) : -1;
            if (id < 0 || id >= SOTTO_TOK_MAX_ID || !end || *end != '\0' || end == item->string) {
                rc = sotto_err_set(err, SOTTO_E_FORMAT, "%s: bad added token id", path);
                break;
            }
            rc = push_added_token(tok, l, item, (int32_t)id, path, err);
            if (rc != SOTTO_OK) break;
        }
    }
    cJSON_Delete(root);
    return rc;
}

/* merges.txt: "#version" lines are skipped, then one "a b" rule per line. */
static int load_merges_txt(sotto_tokenizer *tok, const char *path, sotto_err *err) {
    char *buf = NULL;
    size_t len = 0, lines = 0;
    int rc = sotto_read_file(path, TOK_MAX_FILE, &buf, &len, err);
    if (rc != SOTTO_OK) return rc;
    for (size_t i = 0; i < len; i++) lines += buf[i] == '\n';
    rc = sotto_tok_reserve_merges(tok, lines + 1, err);
    int32_t rank = 0;
    for (size_t i = 0, line = 1; rc == SOTTO_OK && i < len; line++) {
        char *s = buf + i, *nl = memchr(s, '\n', len - i);
        size_t n = nl ? (size_t)(nl - s) : len - i, alen;
        i += n + 1;
        if (n && s[n - 1] == '\r') n--;
        s[n] = '\0';
        const char *b;
        if (n == 0 || strncmp(s, "#version", 8) == 0) continue;
        if (!split_merge(s, &alen, &b) || rank == INT32_MAX)
            rc = sotto_err_set(err, SOTTO_E_FORMAT, "%s: line %zu is not \"a b\"", path, line);
        else
            rc = sotto_tok_add_merge(tok, s, alen, b, strlen(b), rank++, path, err);
    }
    free(buf);
    return rc;
}

static int load_vocab_json_merges(sotto_tokenizer *tok, const char *dir, const char *vpath,
                                  const char *mpath, sotto_err *err) {
    entry_list l = {0};
    cJSON *root = NULL;
    int rc = load_json(vpath, &root, err);
    if (rc != SOTTO_OK) goto done;
    rc = push_vocab_object(tok, &l, root, 1, vpath, "vocabulary", err);
    cJSON_Delete(root);
    if (rc != SOTTO_OK) goto done;
    rc = push_optional_added(tok, &l, dir, "added_tokens.json", err);
    if (rc != SOTTO_OK) goto done;
    rc = push_optional_added(tok, &l, dir, "tokenizer_config.json", err);
    if (rc != SOTTO_OK) goto done;
    rc = finish_vocab(tok, &l, dir, vpath, err);
    if (rc != SOTTO_OK) goto done;
    rc = load_merges_txt(tok, mpath, err);
done:
    free(l.v);
    return rc;
}

static int load_decode_only(sotto_tokenizer *tok, const char *dir, sotto_err *err) {
    entry_list l = {0};
    int found = 0;
    int rc = push_vocabulary_file(tok, &l, dir, 0, &found, err);
    if (rc == SOTTO_OK && !found)
        rc = sotto_err_set(err, SOTTO_E_NOTFOUND,
                           "%s: no tokenizer.json, vocab.json + merges.txt, vocabulary.txt or "
                           "vocabulary.json", dir);
    if (rc == SOTTO_OK) {
        rc = sotto_tok_build_vocab(tok, l.v, l.n, err);
        if (rc != SOTTO_OK) err_in_file(err, rc, dir);
    }
    free(l.v);
    return rc;
}

sotto_tokenizer *sotto_tokenizer_load_dir(const char *dir, sotto_err *err) {
    char p1[TOK_PATH_MAX], p2[TOK_PATH_MAX];
    if (!dir) {
        sotto_err_set(err, SOTTO_E_INVALID, "tokenizer: no model directory given");
        return NULL;
    }
    sotto_tokenizer *tok = calloc(1, sizeof *tok);
    if (!tok) {
        sotto_err_set(err, SOTTO_E_NOMEM, "%s: out of memory for the tokenizer", dir);
        return NULL;
    }
    int rc;
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
        rc = sotto_err_set(err, SOTTO_E_NOTFOUND, "%s: no such model directory", dir);
    } else if (sotto_path_join(p1, sizeof p1, dir, "tokenizer.json") != SOTTO_OK ||
               sotto_path_join(p2, sizeof p2, dir, "merges.txt") != SOTTO_OK) {
        rc = sotto_err_set(err, SOTTO_E_RANGE, "%s: path too long", dir);
    } else if (sotto_file_exists(p1)) {
        rc = load_tokenizer_json(tok, dir, p1, err);
        tok->can_encode = 1;
    } else if (sotto_file_exists(p2) &&
               sotto_path_join(p1, sizeof p1, dir, "vocab.json") == SOTTO_OK &&
               sotto_file_exists(p1)) {
        rc = load_vocab_json_merges(tok, dir, p1, p2, err);
        tok->can_encode = 1;
    } else {
        rc = load_decode_only(tok, dir, err);
    }
    if (rc != SOTTO_OK) {
        sotto_tokenizer_free(tok);
        return NULL;
    }
    return tok;
}
