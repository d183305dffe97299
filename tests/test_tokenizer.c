/* test_tokenizer.c - unit tests of the byte-level BPE tokenizer against the
 * real Whisper tokenizers in models/tiny.en and models/base (found under
 * $SOTTO_SOURCE_DIR, else the current directory). A missing model directory
 * is a failure, not a skip. Expected ids were obtained from the Hugging Face
 * `tokenizers` package (encode(text, add_special_tokens=False)).
 */
#define _POSIX_C_SOURCE 200809L
#include "check.h"
#include "tokenizer.h"

#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define MAX_IDS 4096

static char g_tmpdir[256];

static sotto_tokenizer *load_model(const char *name) {
    const char *src = getenv("SOTTO_SOURCE_DIR");
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/models/%s", src && *src ? src : ".", name);
    struct stat st;
    CHECK_MSG(stat(dir, &st) == 0 && S_ISDIR(st.st_mode),
              "model directory %s is missing (set SOTTO_SOURCE_DIR to the source tree, "
              "and fetch the models with scripts/fetch_models.sh)", dir);
    sotto_err err = {0};
    sotto_tokenizer *tok = sotto_tokenizer_load_dir(dir, &err);
    CHECK_MSG(tok != NULL, "cannot load %s: %s", dir, err.msg);
    return tok;
}

/* Encodes s and compares with the expected ids. */
static void check_encode(const sotto_tokenizer *tok, const char *s, const int32_t *want,
                         size_t n_want) {
    int32_t ids[MAX_IDS];
    size_t n = 0;
    sotto_err err = {0};
    int rc = sotto_tokenizer_encode(tok, s, strlen(s), ids, MAX_IDS, &n, &err);
    CHECK_MSG(rc == SOTTO_OK, "encode \"%s\": %s", s, err.msg);
    int same = rc == SOTTO_OK && n == n_want && memcmp(ids, want, n * sizeof *ids) == 0;
    CHECK_MSG(same, "encode \"%s\": got %zu ids (first %d), want %zu (first %d)", s, n,
              n ? (int)ids[0] : -1, n_want, n_want ? (int)want[0] : -1);
}

#define ENCODES(tok, s, ...)                                                   \
    do {                                                                       \
        static const int32_t want_[] = {__VA_ARGS__};                          \
        check_encode((tok), (s), want_, sizeof want_ / sizeof want_[0]);      \
    } while (0)

/* Decodes ids and compares with the expected text. */
static void check_decode(const sotto_tokenizer *tok, const int32_t *ids, size_t n,
                         const char *want) {
    sotto_err err = {0};
    char *got = sotto_tokenizer_decode(tok, ids, n, &err);
    CHECK_MSG(got != NULL, "decode: %s", err.msg);
    if (got) CHECK_STR(got, want);
    free(got);
}

#define DECODES(tok, want, ...)                                                \
    do {                                                                       \
        static const int32_t ids_[] = {__VA_ARGS__};                           \
        check_decode((tok), ids_, sizeof ids_ / sizeof ids_[0], (want));      \
    } while (0)

static void check_round_trip(const sotto_tokenizer *tok, const char *s) {
    int32_t ids[MAX_IDS];
    size_t n = 0;
    sotto_err err = {0};
    int rc = sotto_tokenizer_encode(tok, s, strlen(s), ids, MAX_IDS, &n, &err);
    CHECK_MSG(rc == SOTTO_OK, "encode \"%s\": %s", s, err.msg);
    if (rc == SOTTO_OK) check_decode(tok, ids, n, s);
}

static void test_specials_tiny(const sotto_tokenizer *tok) {
    CHECK_EQ_INT(sotto_tokenizer_n_vocab(tok), 51864);
    CHECK_EQ_INT(sotto_tokenizer_token_id(tok, "<|endoftext|>"), 50256);
    CHECK_EQ_INT(sotto_tokenizer_token_id(tok, "<|startoftranscript|>"), 50257);
    CHECK_EQ_INT(sotto_tokenizer_token_id(tok, "<|en|>"), 50258);
    CHECK_EQ_INT(sotto_tokenizer_token_id(tok, "<|notimestamps|>"), 50362);
    CHECK_EQ_INT(sotto_tokenizer_token_id(tok, "<|0.00|>"), 50363);
    CHECK_EQ_INT(sotto_tokenizer_token_id(tok, "<|30.00|>"), 51863);
    CHECK_EQ_INT(sotto_tokenizer_token_id(tok, "<|nospeech|>"), -1);
    CHECK_EQ_INT(sotto_tokenizer_token_id(tok, "Ġthe"), 262);
    CHECK_EQ_INT(sotto_tokenizer_token_id(tok, "A"), 32);
    CHECK(sotto_tokenizer_is_special(tok, 50256));
    CHECK(sotto_tokenizer_is_special(tok, 50362));
    CHECK(sotto_tokenizer_is_special(tok, 50363)); /* timestamp from vocabulary.txt */
    CHECK(!sotto_tokenizer_is_special(tok, 262));
    CHECK(!sotto_tokenizer_is_special(tok, 99999));
    CHECK(sotto_tokenizer_can_encode(tok));
    const char *s = sotto_tokenizer_token_str(tok, 50363);
    CHECK(s && strcmp(s, "<|0.00|>") == 0);
    s = sotto_tokenizer_token_str(tok, 262);
    CHECK(s && strcmp(s, "Ġthe") == 0);
    CHECK(sotto_tokenizer_token_str(tok, -1) == NULL);
    CHECK(sotto_tokenizer_token_str(tok, 51864) == NULL);

    const unsigned char *b = NULL;
    size_t len = 0;
    CHECK_EQ_INT(sotto_tokenizer_token_bytes(tok, 262, &b, &len), SOTTO_OK);
    CHECK(len == 4 && memcmp(b, " the", 4) == 0);
    CHECK_EQ_INT(sotto_tokenizer_token_bytes(tok, 198, &b, &len), SOTTO_OK); /* "Ċ" */
    CHECK(len == 1 && b[0] == '\n');
    CHECK_EQ_INT(sotto_tokenizer_token_bytes(tok, 188, &b, &len), SOTTO_OK); /* "Ā" */
    CHECK(len == 1 && b[0] == 0);
    CHECK_EQ_INT(sotto_tokenizer_token_bytes(tok, 33768, &b, &len), SOTTO_OK); /* "æĹ" */
    CHECK(len == 2 && b[0] == 0xE6 && b[1] == 0x97);
    CHECK_EQ_INT(sotto_tokenizer_token_bytes(tok, 50256, &b, &len), SOTTO_E_INVALID);
    CHECK_EQ_INT(sotto_tokenizer_token_bytes(tok, 60000, &b, &len), SOTTO_E_NOTFOUND);
    CHECK_EQ_INT(sotto_tokenizer_token_bytes(tok, -5, &b, &len), SOTTO_E_NOTFOUND);
}

static void test_encode_tiny(const sotto_tokenizer *tok) {
    ENCODES(tok, "Hello world", 15496, 995);
    ENCODES(tok, " And so my fellow Americans, ask not what your country can do for you.",
            843, 523, 616, 5891, 3399, 11, 1265, 407, 644, 534, 1499, 460, 466, 329, 345, 13);
    ENCODES(tok, "don't 's 'S it'll", 9099, 470, 705, 82, 705, 50, 340, 1183);
    ENCODES(tok, "  multiple   spaces\n\n\tnew", 220, 3294, 220, 220, 9029, 628, 197, 3605);
    ENCODES(tok, "Grüße aus München 123", 8642, 9116, 39683, 68, 257, 385, 40790, 77, 6607,
            17031);
    ENCODES(tok, "日本語のテキスト", 33768, 98, 17312, 105, 45739, 252, 5641, 24336, 25084,
            43302);
    ENCODES(tok, "🎉 ok", 8582, 236, 231, 12876);
    ENCODES(tok, "<|en|> hi", 27, 91, 268, 91, 29, 23105); /* specials are plain text */

    size_t n = 99;
    CHECK_EQ_INT(sotto_tokenizer_encode(tok, "", 0, NULL, 0, &n, NULL), SOTTO_OK);
    CHECK_EQ_INT(n, 0);
}

static void test_encode_errors(const sotto_tokenizer *tok) {
    int32_t ids[4] = {-1, -1, -1, -1};
    size_t n = 0;
    sotto_err err = {0};
    CHECK_EQ_INT(sotto_tokenizer_encode(tok, "Hello world", 11, ids, 1, &n, &err),
                 SOTTO_E_RANGE);
    CHECK_EQ_INT(n, 2);
    CHECK_EQ_INT(ids[0], 15496);
    CHECK_EQ_INT(ids[1], -1);
    CHECK_EQ_INT(err.code, SOTTO_E_RANGE);
    CHECK_EQ_INT(sotto_tokenizer_encode(tok, "Hello world", 11, NULL, 0, &n, NULL),
                 SOTTO_E_RANGE);
    CHECK_EQ_INT(n, 2);
    static const char *bad[] = {"abc\xff", "\xc3", "\xc0\xaf", "\xed\xa0\x80", "ok \xe6\x97"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        sotto_err_clear(&err);
        CHECK_EQ_INT(sotto_tokenizer_encode(tok, bad[i], strlen(bad[i]), ids, 4, &n, &err),
                     SOTTO_E_FORMAT);
        CHECK(strstr(err.msg, "UTF-8") != NULL);
    }
}

static void test_round_trips(const sotto_tokenizer *tok) {
    static const char *texts[] = {
        "Hello, world! This is plain ASCII text.",
        "  leading and trailing spaces  ",
        "Caf\xc3\xa9, na\xc3\xafve fa\xc3\xa7" "ade, \xc3\xa9l\xc3\xa8ve, M\xc3\xbcnchen, Stra\xc3\x9f" "e",
        "日本語のテキストです。中文标点“引号”。한국어",
        "emoji 🎉👍🏽 👨‍👩‍👧 ❤️ 🇩🇪",
        "line one\nline two\r\n\n\ttabbed\t\tx \t y   z\n",
        "don't can't won't I'm you're we've they'll he'd it's O'Neil's 'quoted' ''",
        "1 12 123 1234 3.14159 1,000,000 2024-05-01 -42 +7 ½ ² Ⅲ",
        "...!!!??? ,,, ;;; --- ___ (parens) [brackets] {braces} $100 50% #tag @user",
        "non\xc2\xa0" "breaking and\xe3\x80\x80ideographic space and zero\xe2\x80\x8bwidth",
        "<|endoftext|> <|0.00|> look like specials but are text",
    };
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) check_round_trip(tok, texts[i]);
}

static void test_decode_tiny(const sotto_tokenizer *tok) {
    DECODES(tok, "Hello world", 50257, 50362, 15496, 995, 50363, 50256); /* specials skipped */
    DECODES(tok, "Hello world", 15496, -7, 995, 1000000);                 /* unknown ids skipped */
    DECODES(tok, "日", 33768, 98);                   /* one character split over two tokens */
    DECODES(tok, "\xef\xbf\xbd", 33768);             /* lead + continuation alone: one U+FFFD */
    DECODES(tok, "\xef\xbf\xbd", 98);                /* lone continuation byte */
    DECODES(tok, "\xef\xbf\xbd" "A", 33768, 32);
    DECODES(tok, "A\xef\xbf\xbd日", 32, 33768, 33768, 98);
    DECODES(tok, "\xef\xbf\xbd\xef\xbf\xbd", 98, 98);
    DECODES(tok, "\xef\xbf\xbd", 8582, 236);         /* 3 of the 4 bytes of 🎉 */
    DECODES(tok, "🎉", 8582, 236, 231);
    char *empty = sotto_tokenizer_decode(tok, NULL, 0, NULL);
    CHECK(empty && empty[0] == '\0');
    free(empty);
}

static void test_speed(const sotto_tokenizer *tok) {
    static const char *words =
        "And so my fellow Americans, ask not what your country can do for you; ask what "
        "you can do for your country. He hoped there would be stew for dinner, turnips "
        "and carrots and bruised potatoes and fat mutton pieces in 1961. ";
    size_t wlen = strlen(words), len = 0;
    char *text = malloc(wlen * 30 + 1);
    int32_t *ids = malloc(MAX_IDS * sizeof *ids);
    CHECK(text && ids);
    if (!text || !ids) goto done;
    for (int i = 0; i < 30; i++, len += wlen) memcpy(text + len, words, wlen); /* ~1100 words */
    text[len] = '\0';
    struct timespec t0, t1;
    size_t n = 0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int rc = sotto_tokenizer_encode(tok, text, len, ids, MAX_IDS, &n, NULL);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
    CHECK_EQ_INT(rc, SOTTO_OK);
    CHECK(n > 1000);
    /* About 0.3 ms in a release build, 2 ms under ASan: allow for a busy machine. */
#if defined(__SANITIZE_ADDRESS__)
    const double limit_ms = 50.0;
#else
    const double limit_ms = 10.0;
#endif
    CHECK_MSG(ms < limit_ms, "encoding %zu bytes took %.2f ms (limit %.0f)", len, ms, limit_ms);
    fprintf(stderr, "encoded %zu bytes (%zu ids) in %.3f ms\n", len, n, ms);
done:
    free(text);
    free(ids);
}

static void test_base(void) {
    sotto_tokenizer *tok = load_model("base");
    if (!tok) return;
    CHECK_EQ_INT(sotto_tokenizer_n_vocab(tok), 51865);
    CHECK_EQ_INT(sotto_tokenizer_token_id(tok, "<|endoftext|>"), 50257);
    CHECK_EQ_INT(sotto_tokenizer_token_id(tok, "<|startoftranscript|>"), 50258);
    CHECK_EQ_INT(sotto_tokenizer_token_id(tok, "<|en|>"), 50259);
    CHECK_EQ_INT(sotto_tokenizer_token_id(tok, "<|de|>"), 50261);
    CHECK_EQ_INT(sotto_tokenizer_token_id(tok, "<|transcribe|>"), 50359);
    CHECK_EQ_INT(sotto_tokenizer_token_id(tok, "<|translate|>"), 50358);
    CHECK_EQ_INT(sotto_tokenizer_token_id(tok, "<|notimestamps|>"), 50363);
    CHECK_EQ_INT(sotto_tokenizer_token_id(tok, "<|0.00|>"), 50364);
    CHECK(sotto_tokenizer_is_special(tok, 50259));
    CHECK(sotto_tokenizer_is_special(tok, 51864));
    ENCODES(tok, "Hello world", 15947, 1002);
    ENCODES(tok, "don't 's 'S it'll", 13966, 380, 922, 82, 922, 50, 309, 603);
    ENCODES(tok, "  multiple   spaces\n\n\tnew", 220, 3866, 220, 220, 7673, 198, 198, 197, 7686);
    ENCODES(tok, "Grüße aus München 123", 20038, 774, 11451, 3437, 35840, 2470, 34466);
    ENCODES(tok, "日本語のテキスト", 27311, 31348, 2972, 22985, 15535, 40498);
    DECODES(tok, "日", 50258, 50259, 50359, 6890, 50257);
    check_round_trip(tok, "Bonjour à tous, ça va? Ünïcödé — 你好，世界！");
    sotto_tokenizer_free(tok);
}

/* ---- files in a temporary directory --------------------------------------- */

static int write_file(const char *name, const void *data, size_t len) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", g_tmpdir, name);
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    size_t w = fwrite(data, 1, len, f);
    return (fclose(f) == 0 && w == len) ? 0 : -1;
}

static void remove_file(const char *name) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", g_tmpdir, name);
    unlink(path);
}

static char *read_model_file(const char *model, const char *name, size_t *len) {
    const char *src = getenv("SOTTO_SOURCE_DIR");
    char path[1024];
    snprintf(path, sizeof path, "%s/models/%s/%s", src && *src ? src : ".", model, name);
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    if (buf) buf[n] = '\0';
    *len = buf ? (size_t)n : 0;
    return buf;
}

/* Loading g_tmpdir must fail with `code` and a message naming `file`. */
static void check_load_fails(int code, const char *file, const char *what) {
    sotto_err err = {0};
    sotto_tokenizer *tok = sotto_tokenizer_load_dir(g_tmpdir, &err);
    CHECK_MSG(tok == NULL, "%s: loaded anyway", what);
    sotto_tokenizer_free(tok);
    CHECK_MSG(err.code == code, "%s: code %d, want %d (%s)", what, err.code, code, err.msg);
    CHECK_MSG(strstr(err.msg, file) != NULL, "%s: message \"%s\" does not name %s", what,
              err.msg, file);
}

static void test_decode_only(void) {
    size_t len = 0;
    char *vocab = read_model_file("tiny.en", "vocabulary.txt", &len);
    CHECK_MSG(vocab != NULL, "cannot read tiny.en/vocabulary.txt");
    if (!vocab) return;
    CHECK(write_file("vocabulary.txt", vocab, len) == 0);
    free(vocab);
    sotto_err err = {0};
    sotto_tokenizer *tok = sotto_tokenizer_load_dir(g_tmpdir, &err);
    CHECK_MSG(tok != NULL, "decode-only load: %s", err.msg);
    if (tok) {
        CHECK(!sotto_tokenizer_can_encode(tok));
        CHECK_EQ_INT(sotto_tokenizer_n_vocab(tok), 51864);
        CHECK_EQ_INT(sotto_tokenizer_token_id(tok, "<|endoftext|>"), 50256);
        CHECK_EQ_INT(sotto_tokenizer_token_id(tok, "<|0.00|>"), 50363);
        CHECK_EQ_INT(sotto_tokenizer_token_id(tok, "Ġthe"), 262);
        CHECK(sotto_tokenizer_is_special(tok, 50256));
        CHECK(sotto_tokenizer_is_special(tok, 51863));
        CHECK(!sotto_tokenizer_is_special(tok, 262));
        DECODES(tok, "Hello world", 50257, 15496, 995, 50363, 50256);
        DECODES(tok, "日\xef\xbf\xbd", 33768, 98, 33768);
        int32_t ids[4];
        size_t n = 0;
        CHECK_EQ_INT(sotto_tokenizer_encode(tok, "hi", 2, ids, 4, &n, NULL),
                     SOTTO_E_UNSUPPORTED);
    }
    sotto_tokenizer_free(tok);
    remove_file("vocabulary.txt");
}

/* vocab.json + merges.txt (+ added_tokens.json, tokenizer_config.json),
 * written from tiny.en's tokenizer.json, must encode exactly like it. */
static void test_vocab_merges(const sotto_tokenizer *ref) {
    size_t len = 0;
    char *json = read_model_file("tiny.en", "tokenizer.json", &len);
    cJSON *root = json ? cJSON_ParseWithLength(json, len) : NULL;
    free(json);
    cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    cJSON *merges = cJSON_GetObjectItemCaseSensitive(model, "merges");
    char *vocab = cJSON_PrintUnformatted(cJSON_GetObjectItemCaseSensitive(model, "vocab"));
    size_t cap = 1 << 22, n = 0;
    char *txt = malloc(cap);
    CHECK(root && vocab && txt && cJSON_IsArray(merges));
    if (!root || !vocab || !txt || !cJSON_IsArray(merges)) goto done;
    n += (size_t)snprintf(txt, cap, "#version: 0.2\n");
    const cJSON *m;
    cJSON_ArrayForEach(m, merges) {
        if (cJSON_IsString(m) && n + strlen(m->valuestring) + 2 < cap)
            n += (size_t)snprintf(txt + n, cap - n, "%s\n", m->valuestring);
    }
    CHECK(write_file("vocab.json", vocab, strlen(vocab)) == 0);
    CHECK(write_file("merges.txt", txt, n) == 0);
    const char *added = "{\"<|startoftranscript|>\": 50257, \"<|en|>\": 50258}";
    const char *config = "{\"added_tokens_decoder\": {\"50362\": {\"content\": "
                         "\"<|notimestamps|>\", \"special\": true}}}";
    CHECK(write_file("added_tokens.json", added, strlen(added)) == 0);
    CHECK(write_file("tokenizer_config.json", config, strlen(config)) == 0);
    sotto_err err = {0};
    sotto_tokenizer *tok = sotto_tokenizer_load_dir(g_tmpdir, &err);
    CHECK_MSG(tok != NULL, "vocab.json + merges.txt: %s", err.msg);
    if (tok) {
        CHECK(sotto_tokenizer_can_encode(tok));
        CHECK_EQ_INT(sotto_tokenizer_n_vocab(tok), 50363);
        CHECK_EQ_INT(sotto_tokenizer_token_id(tok, "<|notimestamps|>"), 50362);
        CHECK(sotto_tokenizer_is_special(tok, 50362));
        CHECK(sotto_tokenizer_is_special(tok, 50258));
        CHECK(sotto_tokenizer_is_special(tok, 50256)); /* "<|...|>" in vocab.json */
        CHECK(!sotto_tokenizer_is_special(tok, 262));
        const char *s = "Grüße aus München, don't 123 日本語 🎉  x\n";
        int32_t a[64], b[64];
        size_t na = 0, nb = 0;
        CHECK_EQ_INT(sotto_tokenizer_encode(tok, s, strlen(s), a, 64, &na, NULL), SOTTO_OK);
        CHECK_EQ_INT(sotto_tokenizer_encode(ref, s, strlen(s), b, 64, &nb, NULL), SOTTO_OK);
        CHECK(na == nb && na > 0 && memcmp(a, b, na * sizeof *a) == 0);
    }
    sotto_tokenizer_free(tok);
    const char *bad_merges = "#version: 0.2\nĠ t\nnot-a-pair\n";
    CHECK(write_file("merges.txt", bad_merges, strlen(bad_merges)) == 0);
    check_load_fails(SOTTO_E_FORMAT, "merges.txt", "malformed merges.txt");
    const char *unknown = "Ġ t\nzzzzq qqqqz\n";
    CHECK(write_file("merges.txt", unknown, strlen(unknown)) == 0);
    check_load_fails(SOTTO_E_FORMAT, "merges.txt", "merge of unknown tokens");
done:
    remove_file("vocab.json");
    remove_file("merges.txt");
    remove_file("added_tokens.json");
    remove_file("tokenizer_config.json");
    cJSON_Delete(root);
    cJSON_free(vocab);
    free(txt);
}

static void test_corrupt(void) {
    size_t len = 0;
    char *json = read_model_file("tiny.en", "tokenizer.json", &len);
    CHECK_MSG(json != NULL, "cannot read tiny.en/tokenizer.json");
    if (!json) return;
    size_t cuts[] = {0, 1, 10, 300, len / 2, len - 2};
    for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
        CHECK(write_file("tokenizer.json", json, cuts[i]) == 0);
        check_load_fails(SOTTO_E_FORMAT, "tokenizer.json", "truncated tokenizer.json");
    }
    free(json);
    static const char *broken[] = {
        "{\"added_tokens\": []}",
        "{\"model\": {\"type\": \"BPE\", \"vocab\": [1, 2], \"merges\": []}}",
        "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": -3}, \"merges\": []}}",
        "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1}}}",
        "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1}, \"merges\": [\"a b\"]}}",
        "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [], "
        "\"added_tokens\": 5}, \"added_tokens\": [{\"id\": \"x\"}]}",
        "[1, 2, 3]",
        "\xff\xfe garbage",
    };
    for (size_t i = 0; i < sizeof broken / sizeof broken[0]; i++) {
        CHECK(write_file("tokenizer.json", broken[i], strlen(broken[i])) == 0);
        check_load_fails(SOTTO_E_FORMAT, "tokenizer.json", broken[i]);
    }
    const char *wordpiece = "{\"model\": {\"type\": \"WordPiece\", \"vocab\": {}}}";
    CHECK(write_file("tokenizer.json", wordpiece, strlen(wordpiece)) == 0);
    check_load_fails(SOTTO_E_UNSUPPORTED, "tokenizer.json", "WordPiece model");
    /* A tiny but valid tokenizer.json loads and encodes. */
    const char *tiny = "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1, "
                       "\"ab\": 2, \"Ġ\": 3, \"Ġab\": 4}, \"merges\": [[\"a\", \"b\"], "
                       "\"Ġ ab\"]}, \"added_tokens\": [{\"id\": 5, \"content\": \"<|x|>\", "
                       "\"special\": true}]}";
    CHECK(write_file("tokenizer.json", tiny, strlen(tiny)) == 0);
    sotto_err err = {0};
    sotto_tokenizer *tok = sotto_tokenizer_load_dir(g_tmpdir, &err);
    CHECK_MSG(tok != NULL, "small tokenizer.json: %s", err.msg);
    if (tok) {
        ENCODES(tok, "ab ab abba", 2, 4, 4, 1, 0);
        CHECK_EQ_INT(sotto_tokenizer_token_id(tok, "<|x|>"), 5);
        DECODES(tok, "ab ab", 2, 5, 4);
    }
    sotto_tokenizer_free(tok);
    remove_file("tokenizer.json");
    /* An empty directory has no tokenizer at all. */
    check_load_fails(SOTTO_E_NOTFOUND, g_tmpdir, "empty directory");
}

int main(void) {
    snprintf(g_tmpdir, sizeof g_tmpdir, "/tmp/sotto_test_tokenizer_XXXXXX");
    CHECK(mkdtemp(g_tmpdir) != NULL);
    sotto_tokenizer *tok = load_model("tiny.en");
    if (tok) {
        test_specials_tiny(tok);
        test_encode_tiny(tok);
        test_encode_errors(tok);
        test_round_trips(tok);
        test_decode_tiny(tok);
        test_speed(tok);
        test_vocab_merges(tok);
    }
    test_base();
    test_decode_only();
    test_corrupt();
    sotto_tokenizer_free(tok);
    rmdir(g_tmpdir);
    return check_report();
}
