/* test_model_load.c - model loading: the real checkpoints load with the
 * right hyper-parameters, and damaged model directories fail cleanly
 * (sotto_model_load returns NULL, err.code != 0, err.msg names the file and
 * the problem) without crashing (this test runs under ASan/UBSan in CI).
 *
 * CTranslate2: models/tiny.en's model.bin truncated at many lengths (every
 * header boundary of the first variables, the last one and the aliases) and
 * rewritten with one defect each (version, spec name, n_bytes, rank, dtype,
 * missing / misshapen variables, NaN / Inf weights); missing and garbled
 * tokenizer files.
 *
 * Hugging Face: a small synthetic Whisper (d_model 64, 2 heads, 1+1 layers,
 * 80 mels, 1500 audio positions, tiny.en's 51864-token vocabulary) written
 * here as config.json + model.safetensors, which must load with its values
 * in the right places, then damaged (header length, header JSON, offsets,
 * dtype, shape/bytes, missing / duplicate tensors, config.json fields,
 * model_type, shard index). The same weights written as a CTranslate2
 * model.bin (fused Q/K/V) must give identical encoder outputs and logits.
 *
 * Inputs whose size arithmetic can overflow (dims products, a 0-byte file)
 * run last, so that undefined behaviour caught by UBSan (which aborts) does
 * not hide the other results.
 *
 * Models are found under $SOTTO_SOURCE_DIR (else "."); missing models are a
 * failure, not a skip. Temporary directories go under /tmp and are removed.
 * Set SOTTO_TEST_VERBOSE=1 to print every error message.
 */
#define _POSIX_C_SOURCE 200809L
#include "check.h"
#include "half.h"
#include "mapfile.h"
#include "model.h"
#include "whisper.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char g_src[1024];
static int g_verbose;

/* ---- files and directories ------------------------------------------- */

static void join(char *out, size_t n, const char *dir, const char *name) {
    snprintf(out, n, "%s/%s", dir, name);
}

static int write_file(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) {
        fprintf(stderr, "cannot write %s: %s\n", path, strerror(errno));
        return -1;
    }
    int rc = (n && fwrite(data, 1, n, f) != n) ? -1 : 0;
    if (fclose(f) != 0) rc = -1;
    if (rc) fprintf(stderr, "error writing %s\n", path);
    return rc;
}

static int write_text(const char *dir, const char *name, const char *text) {
    char p[2048];
    join(p, sizeof p, dir, name);
    return write_file(p, text, strlen(text));
}

static int copy_file(const char *src, const char *dst) {
    sotto_mapfile mf;
    sotto_err err = {0};
    if (sotto_mapfile_open(src, &mf, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return -1;
    }
    int rc = write_file(dst, mf.data, mf.size);
    sotto_mapfile_close(&mf);
    return rc;
}

static void remove_file(const char *dir, const char *name) {
    char p[2048];
    join(p, sizeof p, dir, name);
    unlink(p);
}

/* Removes a temporary directory and the files in it (one level). */
static void rm_tree(const char *dir) {
    DIR *d = opendir(dir);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d)) != NULL) {
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
            remove_file(dir, e->d_name);
        }
        closedir(d);
    }
    if (rmdir(dir) != 0) fprintf(stderr, "could not remove %s: %s\n", dir, strerror(errno));
}

static int make_tmpdir(char *out, size_t n) {
    snprintf(out, n, "/tmp/sotto_model_load_XXXXXX");
    if (!mkdtemp(out)) {
        perror("mkdtemp");
        return -1;
    }
    return 0;
}

/* Copies tiny.en's tokenizer files (and config.json unless skip_config). */
static int copy_tokenizer(const char *dst, int skip_config) {
    static const char *names[] = {"tokenizer.json", "vocabulary.txt", "config.json"};
    for (int i = 0; i < (skip_config ? 2 : 3); i++) {
        char a[2048], b[2048];
        snprintf(a, sizeof a, "%s/models/tiny.en/%s", g_src, names[i]);
        join(b, sizeof b, dst, names[i]);
        if (copy_file(a, b)) return -1;
    }
    return 0;
}

/* ---- expectations ----------------------------------------------------- */

static int contains(const char *s, const char *sub) { return !sub || strstr(s, sub) != NULL; }

/* Loading `dir` must fail with code `code` (0: any error) and a message that
 * contains `file` and `what` (each may be NULL). */
static void expect_fail(const char *label, const char *dir, int code, const char *file,
                        const char *what) {
    sotto_err err;
    sotto_err_clear(&err);
    sotto_model_params mp = sotto_model_default_params();
    sotto_model *m = sotto_model_load(dir, &mp, &err);
    CHECK_MSG(m == NULL, "%s: a damaged model loaded", label);
    sotto_model_free(m);
    if (m) return;
    CHECK_MSG(err.code != 0, "%s: NULL but err.code == 0", label);
    CHECK_MSG(err.msg[0] != '\0', "%s: empty error message", label);
    if (code) CHECK_MSG(err.code == code, "%s: code %d, expected %d (%s)", label, err.code, code, err.msg);
    CHECK_MSG(contains(err.msg, file), "%s: message does not name '%s': %s", label, file, err.msg);
    CHECK_MSG(contains(err.msg, what), "%s: message does not say '%s': %s", label, what, err.msg);
    if (g_verbose) printf("  %-48s %s\n", label, err.msg);
}

/* Like expect_fail, but `what` may be any of the |-separated words. */
static void expect_fail_any(const char *label, const char *dir, int code, const char *file,
                            const char *whats) {
    sotto_err err;
    sotto_err_clear(&err);
    sotto_model_params mp = sotto_model_default_params();
    sotto_model *m = sotto_model_load(dir, &mp, &err);
    CHECK_MSG(m == NULL, "%s: a damaged model loaded", label);
    sotto_model_free(m);
    if (m) return;
    CHECK_MSG(err.code != 0, "%s: NULL but err.code == 0", label);
    if (code) CHECK_MSG(err.code == code, "%s: code %d, expected %d (%s)", label, err.code, code, err.msg);
    CHECK_MSG(contains(err.msg, file), "%s: message does not name '%s': %s", label, file, err.msg);
    int any = 0;
    char buf[256];
    snprintf(buf, sizeof buf, "%s", whats);
    for (char *save = NULL, *w = strtok_r(buf, "|", &save); w; w = strtok_r(NULL, "|", &save))
        any |= strstr(err.msg, w) != NULL;
    CHECK_MSG(any, "%s: message says none of '%s': %s", label, whats, err.msg);
    if (g_verbose) printf("  %-48s %s\n", label, err.msg);
}

static sotto_model *expect_load(const char *label, const char *dir) {
    sotto_err err;
    sotto_err_clear(&err);
    sotto_model_params mp = sotto_model_default_params();
    sotto_model *m = sotto_model_load(dir, &mp, &err);
    CHECK_MSG(m != NULL, "%s: cannot load %s: %s", label, dir, err.msg);
    return m;
}

/* ---- the real models ---------------------------------------------------- */

static void test_real_models(void) {
    char dir[1100];
    struct stat st;
    snprintf(dir, sizeof dir, "%s/models/tiny.en", g_src);
    CHECK_MSG(stat(dir, &st) == 0, "model directory %s is missing (set SOTTO_SOURCE_DIR; fetch "
              "the models with scripts/fetch_models.sh)", dir);
    sotto_model *m = expect_load("tiny.en", dir);
    if (m) {
        const sotto_hparams *hp = sotto_model_hparams(m);
        CHECK_EQ_INT(hp->n_mels, 80);
        CHECK_EQ_INT(hp->n_audio_ctx, 1500);
        CHECK_EQ_INT(hp->n_audio_state, 384);
        CHECK_EQ_INT(hp->n_audio_head, 6);
        CHECK_EQ_INT(hp->n_audio_layer, 4);
        CHECK_EQ_INT(hp->n_audio_ff, 1536);
        CHECK_EQ_INT(hp->n_text_ctx, 448);
        CHECK_EQ_INT(hp->n_text_state, 384);
        CHECK_EQ_INT(hp->n_text_head, 6);
        CHECK_EQ_INT(hp->n_text_layer, 4);
        CHECK_EQ_INT(hp->n_text_ff, 1536);
        CHECK_EQ_INT(hp->n_vocab, 51864);
        CHECK_EQ_INT(sotto_model_is_multilingual(m), 0);
        CHECK_STR(sotto_model_format_name(m), "ct2");
        const sotto_special_tokens *sp = sotto_model_special(m);
        CHECK_EQ_INT(sp->eot, 50256);
        CHECK_EQ_INT(sp->sot, 50257);
        CHECK_EQ_INT(sp->no_timestamps, 50362);
        CHECK_EQ_INT(sp->timestamp_begin, 50363);
        CHECK_EQ_INT(sp->timestamp_end, 51863);
        CHECK_EQ_INT(sp->n_langs, 0);
        /* a float16 checkpoint: by default its linear layers stay float16 (used
         * in place), about half of float32's bytes */
        char pol[512];
        sotto_model_policy_string(m, pol, sizeof pol);
        CHECK_MSG(strstr(pol, "encoder.attn=f16") && strstr(pol, "decoder.mlp=f16") &&
                      strstr(pol, "embed=f16") && !strstr(pol, "f32"),
                  "tiny.en default policy %s", pol);
        const size_t half = sotto_model_weight_bytes(m);
        CHECK_MSG(half > 70u << 20 && half < 85u << 20, "tiny.en weight bytes %zu", half);
        sotto_model_free(m);
        /* asked for float32: held as float32 */
        sotto_err err;
        sotto_err_clear(&err);
        sotto_model_params mp = sotto_model_default_params();
        mp.weights = SOTTO_WFMT_F32;
        m = sotto_model_load(dir, &mp, &err);
        CHECK_MSG(m != NULL, "tiny.en as f32: %s", err.msg);
        if (m) {
            size_t full = sotto_model_weight_bytes(m);
            CHECK_MSG(full > 140u << 20 && full < 160u << 20, "tiny.en f32 weight bytes %zu", full);
            sotto_model_free(m);
        }
        /* what a load without weights uses, read without loading (the server's
           --default-weights auto) */
        sotto_wfmt w = SOTTO_WFMT_DEFAULT;
        CHECK_EQ_INT(sotto_checkpoint_weights(dir, &w, &err), SOTTO_OK);
        CHECK_EQ_INT((int)w, (int)SOTTO_WFMT_F16);
    }
    snprintf(dir, sizeof dir, "%s/models/base", g_src);
    CHECK_MSG(stat(dir, &st) == 0, "model directory %s is missing", dir);
    m = expect_load("base", dir);
    if (m) {
        const sotto_hparams *hp = sotto_model_hparams(m);
        CHECK_EQ_INT(hp->n_mels, 80);
        CHECK_EQ_INT(hp->n_audio_ctx, 1500);
        CHECK_EQ_INT(hp->n_audio_state, 512);
        CHECK_EQ_INT(hp->n_audio_head, 8);
        CHECK_EQ_INT(hp->n_audio_layer, 6);
        CHECK_EQ_INT(hp->n_audio_ff, 2048);
        CHECK_EQ_INT(hp->n_text_state, 512);
        CHECK_EQ_INT(hp->n_text_head, 8);
        CHECK_EQ_INT(hp->n_text_layer, 6);
        CHECK_EQ_INT(hp->n_text_ctx, 448);
        CHECK_EQ_INT(hp->n_vocab, 51865);
        CHECK_EQ_INT(sotto_model_is_multilingual(m), 1);
        const sotto_special_tokens *sp = sotto_model_special(m);
        CHECK_EQ_INT(sp->eot, 50257);
        CHECK_EQ_INT(sp->sot, 50258);
        CHECK_EQ_INT(sp->lang_begin, 50259);
        CHECK_EQ_INT(sp->translate, 50358);
        CHECK_EQ_INT(sp->n_langs, 99);
        CHECK_EQ_INT(sp->timestamp_begin, 50364);
        sotto_model_free(m);
    }
}

/* ---- CTranslate2 model.bin: index of the original, edited rewrites ---- */

typedef struct ct2_rec {
    char name[160];
    size_t off;      /* start of the record (the name's u16 length) */
    size_t name_end; /* after the name string */
    size_t dims_end; /* after rank + dims */
    size_t data_off; /* after dtype + n_bytes */
    size_t end;      /* after the data */
    int rank;
    uint32_t dims[8];
    uint8_t dtype;
    uint32_t n_bytes;
} ct2_rec;

typedef struct ct2_index {
    const unsigned char *d;
    size_t size;
    size_t spec_off, rev_off, nvars_off, alias_off;
    ct2_rec *vars;
    int n_vars;
} ct2_index;

static int ct2_index_build(ct2_index *ix, const unsigned char *d, size_t size) {
    memset(ix, 0, sizeof *ix);
    ix->d = d;
    ix->size = size;
    size_t p = 4;
#define NEED(n)                                  \
    do {                                         \
        if (size - p < (size_t)(n)) return -1;   \
    } while (0)
    uint16_t len;
    uint32_t n;
    NEED(2);
    ix->spec_off = p;
    memcpy(&len, d + p, 2);
    p += 2;
    NEED(len);
    p += len;
    ix->rev_off = p;
    NEED(8);
    p += 4;
    ix->nvars_off = p;
    memcpy(&n, d + p, 4);
    p += 4;
    if (n > 10000) return -1;
    ix->vars = calloc(n, sizeof *ix->vars);
    if (!ix->vars) return -1;
    for (uint32_t i = 0; i < n; i++) {
        ct2_rec *r = &ix->vars[i];
        r->off = p;
        NEED(2);
        memcpy(&len, d + p, 2);
        p += 2;
        NEED(len);
        snprintf(r->name, sizeof r->name, "%s", (const char *)d + p);
        p += len;
        r->name_end = p;
        NEED(1);
        r->rank = d[p++];
        if (r->rank > 8) return -1;
        NEED(4 * r->rank);
        memcpy(r->dims, d + p, 4 * (size_t)r->rank);
        p += 4 * (size_t)r->rank;
        r->dims_end = p;
        NEED(5);
        r->dtype = d[p++];
        memcpy(&r->n_bytes, d + p, 4);
        p += 4;
        r->data_off = p;
        NEED(r->n_bytes);
        p += r->n_bytes;
        r->end = p;
        ix->n_vars++;
    }
    ix->alias_off = p;
#undef NEED
    return 0;
}

static const ct2_rec *ct2_find(const ct2_index *ix, const char *name) {
    for (int i = 0; i < ix->n_vars; i++)
        if (strcmp(ix->vars[i].name, name) == 0) return &ix->vars[i];
    return NULL;
}

static size_t ct2_elsize(int dt) {
    switch (dt) {
    case 0: return 4;
    case 1: return 1;
    case 2: return 2;
    case 3: return 4;
    case 4: return 2;
    case 5: return 2;
    default: return 1;
    }
}

/* One defect to write into a copy of model.bin. */
typedef struct ct2_edit {
    uint32_t version;     /* 0: keep */
    const char *spec;     /* NULL: keep */
    int64_t n_vars;       /* -1: keep (minus dropped) */
    int64_t n_aliases;    /* -1: keep */
    const char *var;      /* the variable edited below */
    int drop;
    int rank;             /* -1: keep; otherwise the dims below */
    uint32_t dims[9];
    int dtype;            /* -1: keep */
    int64_t nbytes_delta; /* added to the n_bytes field, data unchanged */
    int resize;           /* data resized (cut or zero-filled) to fit dims and dtype */
    int64_t poke;         /* element index to overwrite, -1: none */
    uint32_t poke_bits;   /* raw bits written there (element size of the dtype) */
} ct2_edit;

static ct2_edit ct2_noedit(void) {
    ct2_edit e;
    memset(&e, 0, sizeof e);
    e.n_vars = -1;
    e.n_aliases = -1;
    e.rank = -1;
    e.dtype = -1;
    e.poke = -1;
    return e;
}

static void put_u32(FILE *f, uint32_t v) { fwrite(&v, 4, 1, f); }
static void put_str(FILE *f, const char *s) {
    uint16_t n = (uint16_t)(strlen(s) + 1);
    fwrite(&n, 2, 1, f);
    fwrite(s, 1, n, f);
}

static int ct2_write_edited(const char *path, const ct2_index *ix, const ct2_edit *e) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    const unsigned char *d = ix->d;
    uint32_t v;
    memcpy(&v, d, 4);
    put_u32(f, e->version ? e->version : v);
    if (e->spec) put_str(f, e->spec);
    else fwrite(d + ix->spec_off, 1, ix->rev_off - ix->spec_off, f);
    fwrite(d + ix->rev_off, 1, 4, f);
    int64_t n = ix->n_vars;
    if (e->var && e->drop) n--;
    put_u32(f, (uint32_t)(e->n_vars >= 0 ? e->n_vars : n));
    int seen = 0;
    for (int i = 0; i < ix->n_vars; i++) {
        const ct2_rec *r = &ix->vars[i];
        if (!e->var || strcmp(r->name, e->var) != 0) {
            fwrite(d + r->off, 1, r->end - r->off, f);
            continue;
        }
        seen = 1;
        if (e->drop) continue;
        fwrite(d + r->off, 1, r->name_end - r->off, f);
        int rank = e->rank >= 0 ? e->rank : r->rank;
        const uint32_t *dims = e->rank >= 0 ? e->dims : r->dims;
        uint8_t rk = (uint8_t)rank;
        fwrite(&rk, 1, 1, f);
        int nd = rank <= 9 ? rank : 9; /* rank > 8 is rejected before its dims are read */
        fwrite(dims, 4, (size_t)nd, f);
        int dt = e->dtype >= 0 ? e->dtype : r->dtype;
        uint8_t dt8 = (uint8_t)dt;
        fwrite(&dt8, 1, 1, f);
        uint64_t count = 1;
        for (int k = 0; k < nd; k++) count *= dims[k];
        size_t nb = e->resize ? (size_t)(count * ct2_elsize(dt)) : r->n_bytes;
        put_u32(f, (uint32_t)((int64_t)nb + e->nbytes_delta));
        unsigned char *buf = calloc(nb ? nb : 1, 1);
        if (!buf) {
            fclose(f);
            return -1;
        }
        memcpy(buf, d + r->data_off, nb < r->n_bytes ? nb : r->n_bytes);
        if (e->poke >= 0) {
            size_t es = ct2_elsize(dt);
            if ((size_t)(e->poke + 1) * es <= nb) memcpy(buf + (size_t)e->poke * es, &e->poke_bits, es);
        }
        fwrite(buf, 1, nb, f);
        free(buf);
    }
    if (e->n_aliases >= 0) {
        put_u32(f, (uint32_t)e->n_aliases);
        fwrite(d + ix->alias_off + 4, 1, ix->size - ix->alias_off - 4, f);
    } else {
        fwrite(d + ix->alias_off, 1, ix->size - ix->alias_off, f);
    }
    int rc = ferror(f) ? -1 : 0;
    if (fclose(f) != 0) rc = -1;
    if (e->var && !seen) {
        fprintf(stderr, "test bug: no variable %s in model.bin\n", e->var);
        rc = -1;
    }
    return rc;
}

/* Writes the edited model.bin into dir and expects loading to fail. */
static void ct2_case(const char *label, const char *dir, const ct2_index *ix, const ct2_edit *e,
                     int code, const char *what) {
    char p[2048];
    join(p, sizeof p, dir, "model.bin");
    CHECK_MSG(ct2_write_edited(p, ix, e) == 0, "%s: cannot write the test file", label);
    expect_fail_any(label, dir, code, "model.bin", what);
}

/* The same for defects found in the hyper-parameters, which the message
 * reports for the model directory. */
static void ct2_case_dir(const char *label, const char *dir, const ct2_index *ix,
                         const ct2_edit *e, int code, const char *what) {
    char p[2048];
    join(p, sizeof p, dir, "model.bin");
    CHECK_MSG(ct2_write_edited(p, ix, e) == 0, "%s: cannot write the test file", label);
    expect_fail_any(label, dir, code, dir, what);
}

static int cmp_size(const void *a, const void *b) {
    size_t x = *(const size_t *)a, y = *(const size_t *)b;
    return x < y ? -1 : x > y;
}

static void test_ct2_truncated(const char *dir, const ct2_index *ix) {
    size_t cut[160];
    int n = 0;
    /* (length 0: see test_arithmetic_edges) */
    const size_t fixed[] = {1, 2, 3, 4, 5, 6, 10, 100, 1000, 4096};
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++) cut[n++] = fixed[i];
    cut[n++] = ix->spec_off + 2;
    cut[n++] = ix->rev_off - 1;
    cut[n++] = ix->rev_off;
    cut[n++] = ix->nvars_off;
    cut[n++] = ix->nvars_off + 2;
    cut[n++] = ix->nvars_off + 4;
    /* every boundary of the first three variables and of the last one */
    const int which[] = {0, 1, 2, ix->n_vars - 1};
    for (int w = 0; w < 4; w++) {
        const ct2_rec *r = &ix->vars[which[w]];
        cut[n++] = r->off + 1;
        cut[n++] = r->off + 2;
        cut[n++] = r->name_end - 1;
        cut[n++] = r->name_end;
        cut[n++] = r->name_end + 1;
        cut[n++] = r->dims_end - 1;
        cut[n++] = r->dims_end;
        cut[n++] = r->dims_end + 1;
        cut[n++] = r->data_off - 1;
        cut[n++] = r->data_off;
        cut[n++] = r->data_off + r->n_bytes / 2;
        cut[n++] = r->end - 1;
    }
    cut[n++] = ix->alias_off;
    cut[n++] = ix->alias_off + 2;
    cut[n++] = ix->alias_off + 4;
    cut[n++] = ix->alias_off + 6;
    cut[n++] = ix->size / 2;
    cut[n++] = ix->size - 2;
    cut[n++] = ix->size - 1;
    qsort(cut, (size_t)n, sizeof cut[0], cmp_size);
    char p[2048];
    join(p, sizeof p, dir, "model.bin");
    int cases = 0;
    for (int i = 0; i < n; i++) {
        if (cut[i] >= ix->size || (i > 0 && cut[i] == cut[i - 1])) continue;
        char label[96];
        snprintf(label, sizeof label, "ct2 truncated at %zu of %zu", cut[i], ix->size);
        if (write_file(p, ix->d, cut[i])) {
            CHECK_MSG(0, "%s: cannot write", label);
            continue;
        }
        expect_fail_any(label, dir, SOTTO_E_FORMAT, "model.bin", "truncated|empty|corrupt");
        /* the checkpoint's weights read the same table: refused as well */
        sotto_err aerr;
        sotto_err_clear(&aerr);
        sotto_wfmt w;
        CHECK_MSG(sotto_checkpoint_weights(dir, &w, &aerr) == SOTTO_E_FORMAT,
                  "%s: auto weights accepted it (%s)", label, aerr.msg);
        cases++;
    }
    CHECK_MSG(cases >= 40, "only %d truncation cases", cases);
    printf("ct2: %d truncated model.bin files rejected\n", cases);
}

static void test_ct2_edits(const char *dir, const ct2_index *ix) {
    ct2_edit e;

    e = ct2_noedit();
    e.version = 3;
    ct2_case("ct2 version 3", dir, ix, &e, SOTTO_E_UNSUPPORTED, "version 3");
    e.version = 7;
    ct2_case("ct2 version 7", dir, ix, &e, SOTTO_E_UNSUPPORTED, "version 7");
    e.version = 0xffffffffu;
    ct2_case("ct2 version 2^32-1", dir, ix, &e, SOTTO_E_UNSUPPORTED, "version");

    e = ct2_noedit();
    e.spec = "TransformerSpec";
    ct2_case("ct2 spec TransformerSpec", dir, ix, &e, SOTTO_E_UNSUPPORTED, "TransformerSpec");
    e.spec = "";
    ct2_case("ct2 spec empty", dir, ix, &e, SOTTO_E_UNSUPPORTED, "Whisper");

    e = ct2_noedit();
    e.n_vars = 0xffffffff;
    ct2_case("ct2 variable count 2^32-1", dir, ix, &e, SOTTO_E_FORMAT, "variable count");
    e.n_vars = ix->n_vars + 1;
    ct2_case("ct2 variable count n+1", dir, ix, &e, 0, "truncated|corrupt|unknown type");
    e.n_vars = ix->n_vars - 1;
    ct2_case("ct2 variable count n-1", dir, ix, &e, 0, "truncated|corrupt|missing");
    e.n_vars = 0;
    ct2_case("ct2 variable count 0", dir, ix, &e, 0, "truncated|corrupt|missing");
    e = ct2_noedit();
    e.n_aliases = 0x7fffffff;
    ct2_case("ct2 alias count 2^31-1", dir, ix, &e, SOTTO_E_FORMAT, "truncated|corrupt");

    const char *fc1 = "encoder/layer_0/ffn/linear_0/weight";
    e = ct2_noedit();
    e.var = fc1;
    e.nbytes_delta = 2;
    ct2_case("ct2 n_bytes +2", dir, ix, &e, SOTTO_E_FORMAT, "bytes");
    e.nbytes_delta = -2;
    ct2_case("ct2 n_bytes -2", dir, ix, &e, SOTTO_E_FORMAT, fc1);
    e.nbytes_delta = -(int64_t)ct2_find(ix, fc1)->n_bytes;
    ct2_case("ct2 n_bytes 0", dir, ix, &e, SOTTO_E_FORMAT, fc1);

    e = ct2_noedit();
    e.var = "decoder/layer_1/ffn/linear_1/bias";
    e.rank = 9;
    for (int k = 0; k < 9; k++) e.dims[k] = 1;
    ct2_case("ct2 rank 9", dir, ix, &e, SOTTO_E_FORMAT, "rank 9");
    e.rank = 200;
    ct2_case("ct2 rank 200", dir, ix, &e, SOTTO_E_FORMAT, "rank 200");

    e = ct2_noedit();
    e.var = "encoder/conv2/bias";
    e.dtype = 6;
    ct2_case("ct2 dtype id 6", dir, ix, &e, SOTTO_E_FORMAT, "type id 6");
    e.dtype = 255;
    ct2_case("ct2 dtype id 255", dir, ix, &e, SOTTO_E_FORMAT, "encoder/conv2/bias");
    e.dtype = 0; /* float32 with the float16 byte count */
    ct2_case("ct2 dtype f32 for f16 data", dir, ix, &e, SOTTO_E_FORMAT, "bytes");
    e = ct2_noedit();
    e.var = "encoder/layer_1/ffn/linear_1/weight";
    e.dtype = 1; /* int8 without the "_scale" variable */
    e.resize = 1;
    e.rank = 2;
    e.dims[0] = 384;
    e.dims[1] = 1536;
    ct2_case("ct2 int8 weight without scale", dir, ix, &e, SOTTO_E_FORMAT, "_scale");
    e.dtype = 3; /* int32 weights */
    ct2_case("ct2 int32 weight", dir, ix, &e, 0, "encoder/layer_1/ffn/linear_1/weight");

    /* missing variables */
    e = ct2_noedit();
    e.drop = 1;
    e.var = "encoder/layer_2/self_attention/linear_1/weight";
    ct2_case("ct2 missing enc.2.o.w", dir, ix, &e, SOTTO_E_NOTFOUND, "enc.2.o.w");
    e.var = "encoder/conv1/bias";
    ct2_case("ct2 missing conv1 bias", dir, ix, &e, SOTTO_E_NOTFOUND, "enc.conv1.b");
    e.var = "decoder/layer_norm/gamma";
    ct2_case("ct2 missing decoder layer norm", dir, ix, &e, SOTTO_E_NOTFOUND, "dec.ln.g");
    e.var = "decoder/layer_0/attention/linear_1/weight";
    ct2_case("ct2 missing cross K/V", dir, ix, &e, SOTTO_E_NOTFOUND, "dec.0.ck.w");
    e.var = "decoder/embeddings/weight";
    ct2_case("ct2 missing embedding", dir, ix, &e, SOTTO_E_NOTFOUND, "decoder/embeddings/weight");
    e.var = "encoder/conv1/weight";
    ct2_case("ct2 missing conv1 weight", dir, ix, &e, SOTTO_E_NOTFOUND, "encoder/conv1/weight");
    e.var = "decoder/layer_3/ffn/linear_0/weight"; /* layer count drops to 3 */
    ct2_case("ct2 missing last decoder fc1", dir, ix, &e, SOTTO_E_FORMAT, "decoder/layer_3");

    /* wrong shapes (n_bytes consistent with the shape) */
    e = ct2_noedit();
    e.var = "encoder/layer_1/ffn/linear_0/bias";
    e.rank = 1;
    e.dims[0] = 1535;
    e.resize = 1;
    ct2_case("ct2 fc1 bias [1535]", dir, ix, &e, SOTTO_E_FORMAT, "enc.1.fc1.b");
    e.var = "encoder/layer_1/ffn/linear_0/weight";
    e.rank = 2;
    e.dims[0] = 1536;
    e.dims[1] = 383;
    ct2_case("ct2 fc1 weight [1536 x 383]", dir, ix, &e, SOTTO_E_FORMAT, "enc.1.fc1.w");
    e.dims[0] = 384; /* transposed: same element count */
    e.dims[1] = 1536;
    ct2_case("ct2 fc1 weight transposed [384 x 1536]", dir, ix, &e, SOTTO_E_FORMAT, "enc.1.fc1.w");
    e.var = "decoder/layer_0/self_attention/linear_0/weight";
    e.dims[0] = 1151;
    e.dims[1] = 384;
    ct2_case("ct2 fused qkv [1151 x 384]", dir, ix, &e, SOTTO_E_FORMAT, "self_attention/linear_0");
    e.dims[0] = 384; /* transposed fused Q/K/V */
    e.dims[1] = 1152;
    ct2_case("ct2 fused qkv transposed [384 x 1152]", dir, ix, &e, SOTTO_E_FORMAT,
             "self_attention/linear_0");
    e.var = "decoder/layer_0/self_attention/linear_0/bias";
    e.rank = 1;
    e.dims[0] = 1151;
    ct2_case("ct2 fused qkv bias [1151]", dir, ix, &e, SOTTO_E_FORMAT, "self_attention/linear_0/bias");
    e.var = "encoder/conv1/weight";
    e.rank = 3;
    e.dims[0] = 384;
    e.dims[1] = 80;
    e.dims[2] = 2;
    ct2_case("ct2 conv1 kernel 2", dir, ix, &e, SOTTO_E_FORMAT, "kernel");
    e.rank = 2;
    e.dims[0] = 384;
    e.dims[1] = 240;
    ct2_case("ct2 conv1 rank 2", dir, ix, &e, SOTTO_E_FORMAT, "rank 2");
    e.var = "encoder/position_encodings/encodings";
    e.rank = 2;
    e.dims[0] = 1000;
    e.dims[1] = 384;
    ct2_case_dir("ct2 1000 encoder positions", dir, ix, &e, SOTTO_E_UNSUPPORTED, "1500");
    e.var = "decoder/position_encodings/encodings";
    e.dims[0] = 448;
    e.dims[1] = 383;
    ct2_case("ct2 decoder positions width 383", dir, ix, &e, SOTTO_E_FORMAT, "dec.pos");
    e.var = "decoder/embeddings/weight";
    e.dims[0] = 51864;
    e.dims[1] = 380;
    ct2_case_dir("ct2 embedding width 380", dir, ix, &e, 0, "380");
    e.var = "encoder/layer_0/ffn/linear_0/weight";
    e.dims[0] = 0;
    e.dims[1] = 384;
    ct2_case_dir("ct2 encoder fc1 [0 x 384]", dir, ix, &e, SOTTO_E_FORMAT, "implausible");

    /* non-finite weights (float16 NaN / Inf / -Inf) */
    e = ct2_noedit();
    e.var = "encoder/layer_2/ffn/linear_1/weight";
    e.poke = 1000;
    e.poke_bits = 0x7e00;
    ct2_case("ct2 NaN in encoder fc2", dir, ix, &e, SOTTO_E_FORMAT, "non-finite");
    e.var = "decoder/layer_0/attention/linear_1/weight";
    e.poke = 384 * 384 + 5; /* in the V half of the fused cross K/V */
    e.poke_bits = 0x7c00;
    ct2_case("ct2 +Inf in cross V", dir, ix, &e, SOTTO_E_FORMAT, "decoder/layer_0/attention/linear_1");
    e.var = "decoder/layer_norm/gamma";
    e.poke = 383;
    e.poke_bits = 0xfc00;
    ct2_case("ct2 -Inf in decoder layer norm", dir, ix, &e, SOTTO_E_FORMAT, "non-finite");
    e.var = "decoder/embeddings/weight";
    e.poke = 51863LL * 384 + 383; /* last element */
    e.poke_bits = 0xfe01;
    ct2_case("ct2 NaN in last embedding element", dir, ix, &e, SOTTO_E_FORMAT, "non-finite");

    /* a variable sotto may do without: the head count falls back to width / 64 */
    e = ct2_noedit();
    e.var = "encoder/num_heads";
    e.drop = 1;
    char p[2048];
    join(p, sizeof p, dir, "model.bin");
    CHECK(ct2_write_edited(p, ix, &e) == 0);
    sotto_model *m = expect_load("ct2 without encoder/num_heads", dir);
    if (m) CHECK_EQ_INT(sotto_model_hparams(m)->n_audio_head, 6);
    sotto_model_free(m);
}

/* Missing model files and missing / garbled tokenizer files. */
static void test_missing_files(const char *tiny_bin) {
    char dir[256], p[2048];
    if (make_tmpdir(dir, sizeof dir)) {
        CHECK(0);
        return;
    }
    expect_fail("empty directory", dir, SOTTO_E_NOTFOUND, dir, "model.bin");
    {   /* the checkpoint's weights: none there is an error */
        sotto_err err;
        sotto_err_clear(&err);
        sotto_wfmt w;
        CHECK_EQ_INT(sotto_checkpoint_weights(dir, &w, &err), SOTTO_E_NOTFOUND);
        CHECK_MSG(strstr(err.msg, "model.bin"), "auto weights, empty dir: %s", err.msg);
    }
    CHECK(copy_tokenizer(dir, 0) == 0);
    expect_fail("no model.bin / model.safetensors", dir, SOTTO_E_NOTFOUND, dir, "model.safetensors");
    char nodir[300];
    snprintf(nodir, sizeof nodir, "%s/does-not-exist", dir);
    expect_fail("nonexistent directory", nodir, SOTTO_E_NOTFOUND, "does-not-exist", NULL);
    join(p, sizeof p, dir, "model.bin");
    CHECK(mkdir(p, 0700) == 0); /* a directory named model.bin */
    expect_fail("model.bin is a directory", dir, 0, dir, NULL);
    rmdir(p);

    /* model.bin: a copy of the real one (the tokenizer is read before it) */
    CHECK(copy_file(tiny_bin, p) == 0);
    sotto_model *m = expect_load("tiny.en copy", dir);
    sotto_model_free(m);

    remove_file(dir, "tokenizer.json");
    remove_file(dir, "vocabulary.txt");
    expect_fail("no tokenizer files", dir, SOTTO_E_NOTFOUND, dir, "tokenizer.json");

    CHECK(write_text(dir, "tokenizer.json", "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0,") == 0);
    expect_fail("tokenizer.json truncated", dir, SOTTO_E_FORMAT, "tokenizer.json", "JSON");
    CHECK(write_text(dir, "tokenizer.json", "\x89PNG\r\n\x1a\n\x01\x02garbage") == 0);
    expect_fail("tokenizer.json binary garbage", dir, SOTTO_E_FORMAT, "tokenizer.json", "JSON");
    CHECK(write_text(dir, "tokenizer.json", "") == 0);
    expect_fail("tokenizer.json empty", dir, SOTTO_E_FORMAT, "tokenizer.json", NULL);
    CHECK(write_text(dir, "tokenizer.json", "[1, 2, 3]") == 0);
    expect_fail("tokenizer.json an array", dir, SOTTO_E_FORMAT, "tokenizer.json", "model");
    CHECK(write_text(dir, "tokenizer.json", "{\"model\": {\"type\": \"Unigram\", \"vocab\": []}}") == 0);
    expect_fail("tokenizer.json Unigram", dir, SOTTO_E_UNSUPPORTED, "tokenizer.json", "BPE");
    CHECK(write_text(dir, "tokenizer.json", "{\"model\": {\"type\": \"BPE\", \"vocab\": [1]}}") == 0);
    expect_fail("tokenizer.json vocab not an object", dir, 0, "tokenizer.json", NULL);
    CHECK(write_text(dir, "tokenizer.json",
                     "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1}, \"merges\": "
                     "[\"a b\"]}, \"added_tokens\": 7}") == 0);
    expect_fail("tokenizer.json added_tokens not an array", dir, SOTTO_E_FORMAT, "tokenizer.json",
                "added_tokens");
    /* a valid tokenizer without Whisper's special tokens */
    CHECK(write_text(dir, "tokenizer.json",
                     "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1, \"ab\": 2}, "
                     "\"merges\": [\"a b\"]}, \"added_tokens\": []}") == 0);
    expect_fail("tokenizer without <|endoftext|>", dir, SOTTO_E_FORMAT, dir, "<|endoftext|>");
    remove_file(dir, "tokenizer.json");

    /* vocabulary.txt alone (decode-only), garbled */
    CHECK(write_text(dir, "vocabulary.txt", "") == 0);
    expect_fail_any("vocabulary.txt empty", dir, 0, dir, "vocabulary|token");
    {
        char junk[4096];
        for (size_t i = 0; i < sizeof junk; i++) junk[i] = (char)((i * 2654435761u) >> 13);
        join(p, sizeof p, dir, "vocabulary.txt");
        CHECK(write_file(p, junk, sizeof junk) == 0);
        expect_fail("vocabulary.txt binary junk", dir, SOTTO_E_FORMAT, dir, "<|endoftext|>");
    }
    remove_file(dir, "vocabulary.txt");
    CHECK(write_text(dir, "vocab.json", "{\"a\": 0, \"b\": 1,") == 0);
    CHECK(write_text(dir, "merges.txt", "#version: 0.2\na b\n") == 0);
    expect_fail("vocab.json truncated", dir, SOTTO_E_FORMAT, "vocab.json", "JSON");
    CHECK(write_text(dir, "vocab.json", "{\"a\": 0, \"b\": 1}") == 0);
    CHECK(write_text(dir, "merges.txt", "#version: 0.2\nab\n") == 0);
    expect_fail_any("merges.txt bad line", dir, SOTTO_E_FORMAT, "merges.txt", "line 2|\"a b\"");
    rm_tree(dir);
}

static void test_ct2(void) {
    char bin[1100], dir[256], p[2048];
    snprintf(bin, sizeof bin, "%s/models/tiny.en/model.bin", g_src);
    sotto_mapfile mf;
    sotto_err err = {0};
    if (sotto_mapfile_open(bin, &mf, &err) != 0) {
        CHECK_MSG(0, "cannot open %s: %s", bin, err.msg);
        return;
    }
    ct2_index ix;
    int ok = ct2_index_build(&ix, mf.data, mf.size) == 0;
    CHECK_MSG(ok && ix.n_vars > 100, "cannot index %s", bin);
    if (ok && make_tmpdir(dir, sizeof dir) == 0) {
        CHECK(copy_tokenizer(dir, 0) == 0);
        /* the rewriter itself: no edit gives a loadable copy */
        ct2_edit e = ct2_noedit();
        join(p, sizeof p, dir, "model.bin");
        CHECK(ct2_write_edited(p, &ix, &e) == 0);
        sotto_model *m = expect_load("ct2 rewritten without edits", dir);
        sotto_model_free(m);
        test_ct2_truncated(dir, &ix);
        test_ct2_edits(dir, &ix);
        rm_tree(dir);
    }
    free(ix.vars);
    sotto_mapfile_close(&mf);
    test_missing_files(bin);
}

/* ---- the synthetic model --------------------------------------------------- */

enum { SD = 64, SFF = 256, SHEADS = 2, SMELS = 80, SACTX = 1500, STCTX = 448, SVOCAB = 51864 };

typedef struct syn_tensor {
    char canon[48];
    int rank;
    int64_t dims[3];
    sotto_dtype dt; /* storage type in the files */
    float *v;       /* values (exactly representable in dt) */
    size_t n;
} syn_tensor;

typedef struct syn_model {
    syn_tensor t[80];
    int n;
} syn_model;

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static float rnd(void) { /* uniform in [-1, 1) */
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (float)((g_rng >> 40) * (1.0 / (1 << 23)) - 1.0);
}

static float to_dtype(float x, sotto_dtype dt) {
    if (dt == SOTTO_DT_F16) return sotto_fp16_to_f32(sotto_f32_to_fp16(x));
    if (dt == SOTTO_DT_BF16) return sotto_bf16_to_f32(sotto_f32_to_bf16(x));
    return x;
}

static void syn_add(syn_model *s, const char *canon, int rank, int64_t d0, int64_t d1, int64_t d2,
                    sotto_dtype dt, float center, float scale) {
    syn_tensor *t = &s->t[s->n++];
    snprintf(t->canon, sizeof t->canon, "%s", canon);
    t->rank = rank;
    t->dims[0] = d0;
    t->dims[1] = d1;
    t->dims[2] = d2;
    t->dt = dt;
    t->n = (size_t)d0 * (size_t)(rank > 1 ? d1 : 1) * (size_t)(rank > 2 ? d2 : 1);
    t->v = malloc(t->n * sizeof(float));
    for (size_t i = 0; t->v && i < t->n; i++) t->v[i] = to_dtype(center + scale * rnd(), dt);
}

static const syn_tensor *syn_get(const syn_model *s, const char *canon) {
    for (int i = 0; i < s->n; i++)
        if (strcmp(s->t[i].canon, canon) == 0) return &s->t[i];
    return NULL;
}

static void syn_free(syn_model *s) {
    for (int i = 0; i < s->n; i++) free(s->t[i].v);
    s->n = 0;
}

static void syn_ln(syn_model *s, const char *prefix, sotto_dtype dt) {
    char n[48];
    snprintf(n, sizeof n, "%s.g", prefix);
    syn_add(s, n, 1, SD, 0, 0, dt, 1.0f, 0.1f);
    snprintf(n, sizeof n, "%s.b", prefix);
    syn_add(s, n, 1, SD, 0, 0, dt, 0.0f, 0.1f);
}

static void syn_lin(syn_model *s, const char *prefix, int64_t out, int64_t in, int bias,
                    sotto_dtype wdt) {
    char n[48];
    snprintf(n, sizeof n, "%s.w", prefix);
    syn_add(s, n, 2, out, in, 0, wdt, 0.0f, 1.0f / 8.0f);
    if (bias) {
        snprintf(n, sizeof n, "%s.b", prefix);
        syn_add(s, n, 1, out, 0, 0, SOTTO_DT_F32, 0.0f, 0.05f);
    }
}

/* d_model 64, 2 heads, 1 + 1 layers; fc1 weights float16, one layer norm
 * bfloat16, the embedding float16, everything else float32. No K biases
 * (HF Whisper has none; the CT2 writer fills zeros). */
static void syn_build(syn_model *s) {
    const sotto_dtype F = SOTTO_DT_F32;
    memset(s, 0, sizeof *s);
    syn_add(s, "enc.conv1.w", 3, SD, SMELS, 3, F, 0.0f, 0.05f);
    syn_add(s, "enc.conv1.b", 1, SD, 0, 0, F, 0.0f, 0.05f);
    syn_add(s, "enc.conv2.w", 3, SD, SD, 3, F, 0.0f, 0.05f);
    syn_add(s, "enc.conv2.b", 1, SD, 0, 0, F, 0.0f, 0.05f);
    syn_add(s, "enc.pos", 2, SACTX, SD, 0, F, 0.0f, 0.5f);
    syn_ln(s, "enc.0.attn_ln", F);
    syn_lin(s, "enc.0.q", SD, SD, 1, F);
    syn_lin(s, "enc.0.k", SD, SD, 0, F);
    syn_lin(s, "enc.0.v", SD, SD, 1, F);
    syn_lin(s, "enc.0.o", SD, SD, 1, F);
    syn_ln(s, "enc.0.mlp_ln", SOTTO_DT_BF16);
    syn_lin(s, "enc.0.fc1", SFF, SD, 1, SOTTO_DT_F16);
    syn_lin(s, "enc.0.fc2", SD, SFF, 1, F);
    syn_ln(s, "enc.ln", F);
    syn_add(s, "dec.emb", 2, SVOCAB, SD, 0, SOTTO_DT_F16, 0.0f, 0.5f);
    syn_add(s, "dec.pos", 2, STCTX, SD, 0, F, 0.0f, 0.5f);
    syn_ln(s, "dec.0.attn_ln", F);
    syn_lin(s, "dec.0.q", SD, SD, 1, F);
    syn_lin(s, "dec.0.k", SD, SD, 0, F);
    syn_lin(s, "dec.0.v", SD, SD, 1, F);
    syn_lin(s, "dec.0.o", SD, SD, 1, F);
    syn_ln(s, "dec.0.cross_ln", F);
    syn_lin(s, "dec.0.cq", SD, SD, 1, F);
    syn_lin(s, "dec.0.ck", SD, SD, 0, F);
    syn_lin(s, "dec.0.cv", SD, SD, 1, F);
    syn_lin(s, "dec.0.co", SD, SD, 1, F);
    syn_ln(s, "dec.0.mlp_ln", F);
    syn_lin(s, "dec.0.fc1", SFF, SD, 1, SOTTO_DT_F16);
    syn_lin(s, "dec.0.fc2", SD, SFF, 1, F);
    syn_ln(s, "dec.ln", F);
}

/* Canonical name -> Hugging Face name. */
static void hf_name(const char *canon, char *out, size_t n) {
    static const struct {
        const char *c, *h;
    } globals[] = {
        {"enc.conv1.w", "encoder.conv1.weight"}, {"enc.conv1.b", "encoder.conv1.bias"},
        {"enc.conv2.w", "encoder.conv2.weight"}, {"enc.conv2.b", "encoder.conv2.bias"},
        {"enc.pos", "encoder.embed_positions.weight"},
        {"enc.ln.g", "encoder.layer_norm.weight"}, {"enc.ln.b", "encoder.layer_norm.bias"},
        {"dec.emb", "decoder.embed_tokens.weight"},
        {"dec.pos", "decoder.embed_positions.weight"},
        {"dec.ln.g", "decoder.layer_norm.weight"}, {"dec.ln.b", "decoder.layer_norm.bias"},
    };
    static const struct {
        const char *c, *h;
    } layer[] = {
        {"attn_ln.g", "self_attn_layer_norm.weight"}, {"attn_ln.b", "self_attn_layer_norm.bias"},
        {"q.w", "self_attn.q_proj.weight"}, {"q.b", "self_attn.q_proj.bias"},
        {"k.w", "self_attn.k_proj.weight"}, {"v.w", "self_attn.v_proj.weight"},
        {"v.b", "self_attn.v_proj.bias"}, {"o.w", "self_attn.out_proj.weight"},
        {"o.b", "self_attn.out_proj.bias"},
        {"cross_ln.g", "encoder_attn_layer_norm.weight"}, {"cross_ln.b", "encoder_attn_layer_norm.bias"},
        {"cq.w", "encoder_attn.q_proj.weight"}, {"cq.b", "encoder_attn.q_proj.bias"},
        {"ck.w", "encoder_attn.k_proj.weight"}, {"cv.w", "encoder_attn.v_proj.weight"},
        {"cv.b", "encoder_attn.v_proj.bias"}, {"co.w", "encoder_attn.out_proj.weight"},
        {"co.b", "encoder_attn.out_proj.bias"},
        {"mlp_ln.g", "final_layer_norm.weight"}, {"mlp_ln.b", "final_layer_norm.bias"},
        {"fc1.w", "fc1.weight"}, {"fc1.b", "fc1.bias"}, {"fc2.w", "fc2.weight"}, {"fc2.b", "fc2.bias"},
    };
    for (size_t i = 0; i < sizeof globals / sizeof globals[0]; i++)
        if (strcmp(canon, globals[i].c) == 0) {
            snprintf(out, n, "model.%s", globals[i].h);
            return;
        }
    int idx = atoi(canon + 4);
    const char *suffix = strchr(canon + 4, '.') + 1;
    for (size_t i = 0; i < sizeof layer / sizeof layer[0]; i++)
        if (strcmp(suffix, layer[i].c) == 0) {
            snprintf(out, n, "model.%s.layers.%d.%s", canon[0] == 'e' ? "encoder" : "decoder", idx,
                     layer[i].h);
            return;
        }
    snprintf(out, n, "unmapped.%s", canon);
}

static const char *st_dtype_name(sotto_dtype dt) {
    return dt == SOTTO_DT_F16 ? "F16" : dt == SOTTO_DT_BF16 ? "BF16" : "F32";
}

/* Appends n values as dtype dt to a growing byte buffer. */
typedef struct bytes {
    unsigned char *p;
    size_t n, cap;
} bytes;

static int bytes_put(bytes *b, const void *src, size_t n) {
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 1 << 16;
        while (cap < b->n + n) cap *= 2;
        unsigned char *q = realloc(b->p, cap);
        if (!q) return -1;
        b->p = q;
        b->cap = cap;
    }
    memcpy(b->p + b->n, src, n);
    b->n += n;
    return 0;
}

static int bytes_put_values(bytes *b, const float *v, size_t n, sotto_dtype dt) {
    for (size_t i = 0; i < n; i++) {
        if (dt == SOTTO_DT_F32) {
            if (bytes_put(b, &v[i], 4)) return -1;
        } else {
            uint16_t h = dt == SOTTO_DT_F16 ? sotto_f32_to_fp16(v[i]) : sotto_f32_to_bf16(v[i]);
            if (bytes_put(b, &h, 2)) return -1;
        }
    }
    return 0;
}

/* The header (cJSON object) and data area of a safetensors file holding the
 * tensors of s whose canonical name starts with `prefix` (NULL: all). */
static cJSON *st_build(const syn_model *s, const char *prefix, bytes *data) {
    cJSON *h = cJSON_CreateObject();
    cJSON *meta = cJSON_AddObjectToObject(h, "__metadata__");
    cJSON_AddStringToObject(meta, "format", "pt");
    for (int i = 0; i < s->n; i++) {
        const syn_tensor *t = &s->t[i];
        if (prefix && strncmp(t->canon, prefix, strlen(prefix)) != 0) continue;
        char name[128];
        hf_name(t->canon, name, sizeof name);
        size_t begin = data->n;
        bytes_put_values(data, t->v, t->n, t->dt);
        cJSON *e = cJSON_AddObjectToObject(h, name);
        cJSON_AddStringToObject(e, "dtype", st_dtype_name(t->dt));
        cJSON *shape = cJSON_AddArrayToObject(e, "shape");
        for (int d = 0; d < t->rank; d++) cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)t->dims[d]));
        cJSON *off = cJSON_AddArrayToObject(e, "data_offsets");
        cJSON_AddItemToArray(off, cJSON_CreateNumber((double)begin));
        cJSON_AddItemToArray(off, cJSON_CreateNumber((double)data->n));
    }
    return h;
}

/* Serializes header + data into one file image (header padded to 8 bytes). */
static int st_image(const cJSON *h, const bytes *data, bytes *out) {
    char *txt = cJSON_PrintUnformatted(h);
    if (!txt) return -1;
    size_t hl = strlen(txt), pad = (8 - hl % 8) % 8;
    uint64_t hlen = hl + pad;
    out->n = 0;
    int rc = bytes_put(out, &hlen, 8) || bytes_put(out, txt, hl) ||
             bytes_put(out, "        ", pad) || bytes_put(out, data->p, data->n);
    free(txt);
    return rc ? -1 : 0;
}

static int st_write(const char *dir, const char *name, const cJSON *h, const bytes *data) {
    bytes img = {0};
    char p[2048];
    join(p, sizeof p, dir, name);
    int rc = st_image(h, data, &img) || write_file(p, img.p, img.n);
    free(img.p);
    return rc ? -1 : 0;
}

static cJSON *syn_config(void) {
    cJSON *c = cJSON_CreateObject();
    cJSON_AddStringToObject(c, "model_type", "whisper");
    cJSON *arch = cJSON_AddArrayToObject(c, "architectures");
    cJSON_AddItemToArray(arch, cJSON_CreateString("WhisperForConditionalGeneration"));
    cJSON_AddNumberToObject(c, "d_model", SD);
    cJSON_AddNumberToObject(c, "encoder_layers", 1);
    cJSON_AddNumberToObject(c, "encoder_attention_heads", SHEADS);
    cJSON_AddNumberToObject(c, "encoder_ffn_dim", SFF);
    cJSON_AddNumberToObject(c, "decoder_layers", 1);
    cJSON_AddNumberToObject(c, "decoder_attention_heads", SHEADS);
    cJSON_AddNumberToObject(c, "decoder_ffn_dim", SFF);
    cJSON_AddNumberToObject(c, "num_mel_bins", SMELS);
    cJSON_AddNumberToObject(c, "vocab_size", SVOCAB);
    cJSON_AddNumberToObject(c, "max_source_positions", SACTX);
    cJSON_AddNumberToObject(c, "max_target_positions", STCTX);
    cJSON_AddStringToObject(c, "activation_function", "gelu");
    cJSON_AddBoolToObject(c, "scale_embedding", 0);
    cJSON_AddStringToObject(c, "torch_dtype", "float32");
    return c;
}

static int write_json(const char *dir, const char *name, const cJSON *j) {
    char *txt = cJSON_Print(j);
    int rc = txt ? write_text(dir, name, txt) : -1;
    free(txt);
    return rc;
}

/* CTranslate2 model.bin of the synthetic model: fused self-attention Q/K/V
 * and cross-attention K/V with zero K biases, num_heads scalars, the
 * projection alias. */
typedef struct ct2_out {
    const char *name;
    sotto_dtype dt;
    int rank;
    int64_t dims[3];
    const float *parts[3]; /* concatenated along rows; NULL part = zeros of parts_n[k] */
    size_t parts_n[3];
    int n_parts;
} ct2_out;

static int ct2_dtype_id(sotto_dtype dt) { return dt == SOTTO_DT_F16 ? 4 : dt == SOTTO_DT_BF16 ? 5 : 0; }

static void ct2_put_var(bytes *b, const ct2_out *o) {
    uint16_t len = (uint16_t)(strlen(o->name) + 1);
    bytes_put(b, &len, 2);
    bytes_put(b, o->name, len);
    uint8_t rank = (uint8_t)o->rank;
    bytes_put(b, &rank, 1);
    size_t count = 1;
    for (int d = 0; d < o->rank; d++) {
        uint32_t dim = (uint32_t)o->dims[d];
        bytes_put(b, &dim, 4);
        count *= (size_t)dim;
    }
    uint8_t dt = (uint8_t)ct2_dtype_id(o->dt);
    bytes_put(b, &dt, 1);
    uint32_t nb = (uint32_t)(count * sotto_dtype_size(o->dt));
    bytes_put(b, &nb, 4);
    for (int k = 0; k < o->n_parts; k++) {
        if (o->parts[k]) {
            bytes_put_values(b, o->parts[k], o->parts_n[k], o->dt);
        } else {
            float z = 0.0f;
            for (size_t i = 0; i < o->parts_n[k]; i++) bytes_put_values(b, &z, 1, o->dt);
        }
    }
}

static void ct2_put_scalar_i16(bytes *b, const char *name, int16_t v) {
    uint16_t len = (uint16_t)(strlen(name) + 1);
    bytes_put(b, &len, 2);
    bytes_put(b, name, len);
    uint8_t rank = 0, dt = 2;
    uint32_t nb = 2;
    bytes_put(b, &rank, 1);
    bytes_put(b, &dt, 1);
    bytes_put(b, &nb, 4);
    bytes_put(b, &v, 2);
}

static int ct2_write_syn(const char *path, const syn_model *s) {
    static const struct {
        const char *ct2, *canon[3];
    } globals[] = {
        {"encoder/conv1/weight", {"enc.conv1.w"}}, {"encoder/conv1/bias", {"enc.conv1.b"}},
        {"encoder/conv2/weight", {"enc.conv2.w"}}, {"encoder/conv2/bias", {"enc.conv2.b"}},
        {"encoder/position_encodings/encodings", {"enc.pos"}},
        {"encoder/layer_norm/gamma", {"enc.ln.g"}}, {"encoder/layer_norm/beta", {"enc.ln.b"}},
        {"decoder/embeddings/weight", {"dec.emb"}},
        {"decoder/position_encodings/encodings", {"dec.pos"}},
        {"decoder/layer_norm/gamma", {"dec.ln.g"}}, {"decoder/layer_norm/beta", {"dec.ln.b"}},
    };
    static const struct {
        const char *ct2, *canon[3];
        int dec_only;
    } layer[] = {
        {"self_attention/layer_norm/gamma", {"attn_ln.g"}, 0},
        {"self_attention/layer_norm/beta", {"attn_ln.b"}, 0},
        {"self_attention/linear_0/weight", {"q.w", "k.w", "v.w"}, 0},
        {"self_attention/linear_0/bias", {"q.b", "k.b", "v.b"}, 0},
        {"self_attention/linear_1/weight", {"o.w"}, 0},
        {"self_attention/linear_1/bias", {"o.b"}, 0},
        {"attention/layer_norm/gamma", {"cross_ln.g"}, 1},
        {"attention/layer_norm/beta", {"cross_ln.b"}, 1},
        {"attention/linear_0/weight", {"cq.w"}, 1},
        {"attention/linear_0/bias", {"cq.b"}, 1},
        {"attention/linear_1/weight", {"ck.w", "cv.w"}, 1},
        {"attention/linear_1/bias", {"ck.b", "cv.b"}, 1},
        {"attention/linear_2/weight", {"co.w"}, 1},
        {"attention/linear_2/bias", {"co.b"}, 1},
        {"ffn/layer_norm/gamma", {"mlp_ln.g"}, 0},
        {"ffn/layer_norm/beta", {"mlp_ln.b"}, 0},
        {"ffn/linear_0/weight", {"fc1.w"}, 0},
        {"ffn/linear_0/bias", {"fc1.b"}, 0},
        {"ffn/linear_1/weight", {"fc2.w"}, 0},
        {"ffn/linear_1/bias", {"fc2.b"}, 0},
    };
    bytes b = {0};
    uint32_t version = 6, revision = 3, n_vars = 0;
    bytes_put(&b, &version, 4);
    const char *spec = "WhisperSpec";
    uint16_t len = (uint16_t)(strlen(spec) + 1);
    bytes_put(&b, &len, 2);
    bytes_put(&b, spec, len);
    bytes_put(&b, &revision, 4);
    size_t nvars_at = b.n;
    bytes_put(&b, &n_vars, 4);
    ct2_put_scalar_i16(&b, "encoder/num_heads", SHEADS);
    ct2_put_scalar_i16(&b, "decoder/num_heads", SHEADS);
    n_vars += 2;
    int ok = 1;
    /* one list: globals, then the layers of both sides */
    for (int pass = 0; pass < 3; pass++) {
        size_t count = pass == 0 ? sizeof globals / sizeof globals[0] : sizeof layer / sizeof layer[0];
        for (size_t i = 0; i < count; i++) {
            ct2_out o;
            memset(&o, 0, sizeof o);
            char name[128];
            const char *const *canon;
            if (pass == 0) {
                snprintf(name, sizeof name, "%s", globals[i].ct2);
                canon = globals[i].canon;
            } else {
                if (pass == 1 && layer[i].dec_only) continue;
                snprintf(name, sizeof name, "%s/layer_0/%s", pass == 1 ? "encoder" : "decoder",
                         layer[i].ct2);
                canon = layer[i].canon;
            }
            o.name = name;
            int64_t rows = 0;
            const syn_tensor *first = NULL;
            for (int k = 0; k < 3 && canon[k]; k++) {
                char c[48];
                if (pass == 0) snprintf(c, sizeof c, "%s", canon[k]);
                else snprintf(c, sizeof c, "%s.0.%s", pass == 1 ? "enc" : "dec", canon[k]);
                const syn_tensor *t = syn_get(s, c);
                o.parts[k] = t ? t->v : NULL;
                o.n_parts++;
                if (t && !first) first = t;
                if (t) {
                    o.parts_n[k] = t->n;
                    rows += t->dims[0];
                }
            }
            if (!first) {
                ok = 0;
                continue;
            }
            for (int k = 0; k < o.n_parts; k++) /* absent K bias: zeros */
                if (!o.parts[k]) {
                    o.parts_n[k] = first->n;
                    rows += first->dims[0];
                }
            o.dt = first->dt;
            o.rank = first->rank;
            o.dims[0] = rows;
            o.dims[1] = first->dims[1];
            o.dims[2] = first->dims[2];
            ct2_put_var(&b, &o);
            n_vars++;
        }
    }
    memcpy(b.p + nvars_at, &n_vars, 4);
    uint32_t n_alias = 1;
    bytes_put(&b, &n_alias, 4);
    const char *alias[2] = {"decoder/projection/weight", "decoder/embeddings/weight"};
    for (int k = 0; k < 2; k++) {
        len = (uint16_t)(strlen(alias[k]) + 1);
        bytes_put(&b, &len, 2);
        bytes_put(&b, alias[k], len);
    }
    int rc = ok ? write_file(path, b.p, b.n) : -1;
    free(b.p);
    return rc;
}

/* Max |a - b| of two float arrays. */
static double max_diff(const float *a, const float *b, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (isnan(d)) return d;
        if (d > m) m = d;
    }
    return m;
}

/* Runs the encoder on a fixed random window and one decoder call on
 * <|startoftranscript|><|notimestamps|>; returns malloc'd encoder output and
 * logits (NULL on failure). */
static int run_model(const sotto_model *m, float **enc_out, float **logits) {
    const sotto_hparams *hp = sotto_model_hparams(m);
    const sotto_special_tokens *sp = sotto_model_special(m);
    sotto_err err;
    sotto_err_clear(&err);
    *enc_out = NULL;
    *logits = NULL;
    float *mel = malloc(sizeof(float) * (size_t)hp->n_mels * SOTTO_N_FRAMES);
    sotto_workspace *ws = sotto_workspace_create();
    sotto_state *st = sotto_state_create(m, 1, &err);
    int rc = -1;
    if (!mel || !ws || !st) goto done;
    uint64_t save = g_rng;
    g_rng = 12345;
    for (size_t i = 0; i < (size_t)hp->n_mels * SOTTO_N_FRAMES; i++) mel[i] = rnd();
    g_rng = save;
    if (sotto_encode(m, ws, st, mel, &err)) {
        CHECK_MSG(0, "encode: %s", err.msg);
        goto done;
    }
    size_t ne = (size_t)hp->n_audio_ctx * hp->n_audio_state;
    *enc_out = malloc(sizeof(float) * ne);
    *logits = malloc(sizeof(float) * (size_t)hp->n_vocab);
    if (!*enc_out || !*logits) goto done;
    memcpy(*enc_out, sotto_state_encoder_output(st), sizeof(float) * ne);
    int32_t toks[2] = {sp->sot, sp->no_timestamps};
    int want = 1;
    if (sotto_decode_tokens(m, ws, st, 0, toks, 2, &want, 1, *logits, &err)) {
        CHECK_MSG(0, "decode: %s", err.msg);
        goto done;
    }
    rc = 0;
done:
    if (rc) {
        free(*enc_out);
        free(*logits);
        *enc_out = *logits = NULL;
    }
    free(mel);
    sotto_state_free(st);
    sotto_workspace_free(ws);
    return rc;
}

/* The loaded values of canonical tensor `canon` (vectors and matrices). */
static const float *loaded(const sotto_model *m, const char *canon) {
    if (strcmp(canon, "enc.conv1.w") == 0) return m->conv1_w;
    if (strcmp(canon, "enc.conv2.w") == 0) return m->conv2_w;
    if (strcmp(canon, "enc.pos") == 0) return m->enc_pos;
    if (strcmp(canon, "dec.emb") == 0) return m->emb.data;
    if (strcmp(canon, "dec.pos") == 0) return m->dec_pos;
    if (strcmp(canon, "enc.0.q.w") == 0) return m->enc[0].q.w.data;
    if (strcmp(canon, "enc.0.k.w") == 0) return m->enc[0].k.w.data;
    if (strcmp(canon, "enc.0.v.w") == 0) return m->enc[0].v.w.data;
    if (strcmp(canon, "enc.0.v.b") == 0) return m->enc[0].v.b;
    if (strcmp(canon, "enc.0.fc1.w") == 0) return m->enc[0].fc1.w.data;
    if (strcmp(canon, "enc.0.mlp_ln.g") == 0) return m->enc[0].mlp_ln.g;
    if (strcmp(canon, "dec.0.ck.w") == 0) return m->dec[0].ck.w.data;
    if (strcmp(canon, "dec.0.cv.w") == 0) return m->dec[0].cv.w.data;
    if (strcmp(canon, "dec.0.cv.b") == 0) return m->dec[0].cv.b;
    if (strcmp(canon, "dec.0.co.w") == 0) return m->dec[0].co.w.data;
    if (strcmp(canon, "dec.0.fc2.w") == 0) return m->dec[0].fc2.w.data;
    if (strcmp(canon, "dec.ln.b") == 0) return m->dec_ln.b;
    return NULL;
}

static void check_synthetic_values(const char *label, const sotto_model *m, const syn_model *s) {
    const sotto_hparams *hp = sotto_model_hparams(m);
    CHECK_EQ_INT(hp->n_mels, SMELS);
    CHECK_EQ_INT(hp->n_audio_ctx, SACTX);
    CHECK_EQ_INT(hp->n_audio_state, SD);
    CHECK_EQ_INT(hp->n_audio_head, SHEADS);
    CHECK_EQ_INT(hp->n_audio_layer, 1);
    CHECK_EQ_INT(hp->n_audio_ff, SFF);
    CHECK_EQ_INT(hp->n_text_ctx, STCTX);
    CHECK_EQ_INT(hp->n_text_state, SD);
    CHECK_EQ_INT(hp->n_text_head, SHEADS);
    CHECK_EQ_INT(hp->n_text_layer, 1);
    CHECK_EQ_INT(hp->n_text_ff, SFF);
    CHECK_EQ_INT(hp->n_vocab, SVOCAB);
    CHECK_EQ_INT(sotto_model_is_multilingual(m), 0);
    static const char *names[] = {"enc.conv1.w", "enc.conv2.w", "enc.pos",    "dec.emb",
                                  "dec.pos",     "enc.0.q.w",   "enc.0.k.w",  "enc.0.v.w",
                                  "enc.0.v.b",   "enc.0.fc1.w", "enc.0.mlp_ln.g", "dec.0.ck.w",
                                  "dec.0.cv.w",  "dec.0.cv.b",  "dec.0.co.w", "dec.0.fc2.w",
                                  "dec.ln.b"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        const syn_tensor *t = syn_get(s, names[i]);
        const float *v = loaded(m, names[i]);
        CHECK_MSG(t && v, "%s: %s not loaded", label, names[i]);
        if (t && v)
            CHECK_MSG(max_diff(t->v, v, t->n) == 0.0, "%s: %s differs from the file (max |diff| %g)",
                      label, names[i], max_diff(t->v, v, t->n));
    }
    /* K projections have no bias in HF; a zero vector (CT2) is fine too */
    for (int side = 0; side < 2; side++) {
        const float *kb = side ? m->dec[0].ck.b : m->enc[0].k.b;
        int zero = 1;
        for (int i = 0; kb && i < SD; i++) zero &= kb[i] == 0.0f;
        CHECK_MSG(zero, "%s: %s K bias is not zero", label, side ? "cross" : "encoder");
    }
}

/* Expects loading dir to fail after writing header h (+ data) as
 * model.safetensors. */
static void hf_case(const char *label, const char *dir, const cJSON *h, const bytes *data, int code,
                    const char *what) {
    CHECK_MSG(st_write(dir, "model.safetensors", h, data) == 0, "%s: cannot write", label);
    expect_fail_any(label, dir, code, "model.safetensors", what);
}

static cJSON *entry(cJSON *h, const char *canon) {
    char name[128];
    hf_name(canon, name, sizeof name);
    return cJSON_GetObjectItemCaseSensitive(h, name);
}

static void set_array(cJSON *e, const char *key, int n, const double *v) {
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; i < n; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber(v[i]));
    cJSON_ReplaceItemInObjectCaseSensitive(e, key, a);
}

static double offset_of(cJSON *e, int k) {
    return cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(e, "data_offsets"), k)->valuedouble;
}

static void test_hf_damaged(const char *dir, const cJSON *good, const bytes *data) {
    bytes img = {0};
    char p[2048];
    join(p, sizeof p, dir, "model.safetensors");
    CHECK(st_image(good, data, &img) == 0);
    uint64_t hlen;
    memcpy(&hlen, img.p, 8);

    /* truncations */
    const size_t cuts[] = {0, 1, 4, 7, 8, 9, 8 + (size_t)hlen / 2, 8 + (size_t)hlen - 1,
                           8 + (size_t)hlen, 8 + (size_t)hlen + 1, 8 + (size_t)hlen + 1000,
                           img.n / 2, img.n - 4, img.n - 1};
    for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
        char label[96];
        snprintf(label, sizeof label, "hf truncated at %zu of %zu", cuts[i], img.n);
        CHECK(write_file(p, img.p, cuts[i]) == 0);
        expect_fail_any(label, dir, SOTTO_E_FORMAT, "model.safetensors",
                        "truncated|does not fit|outside|not valid JSON");
    }

    /* header length field */
    const uint64_t bad_hlen[] = {0, 1, img.n - 8 + 1, img.n, (uint64_t)1 << 40, UINT64_MAX};
    for (size_t i = 0; i < sizeof bad_hlen / sizeof bad_hlen[0]; i++) {
        char label[96];
        snprintf(label, sizeof label, "hf header length %llu (file %zu)",
                 (unsigned long long)bad_hlen[i], img.n);
        bytes cp = {0};
        bytes_put(&cp, img.p, img.n);
        memcpy(cp.p, &bad_hlen[i], 8);
        CHECK(write_file(p, cp.p, cp.n) == 0);
        expect_fail_any(label, dir, SOTTO_E_FORMAT, "model.safetensors",
                        "does not fit|not valid JSON|outside|bytes");
        free(cp.p);
    }

    /* header not JSON */
    {
        bytes cp = {0};
        bytes_put(&cp, img.p, img.n);
        memcpy(cp.p + 8, "this is not JSON", 16);
        CHECK(write_file(p, cp.p, cp.n) == 0);
        expect_fail("hf header not JSON", dir, SOTTO_E_FORMAT, "model.safetensors", "JSON");
        memset(cp.p + 8, 0, (size_t)hlen); /* NULs */
        CHECK(write_file(p, cp.p, cp.n) == 0);
        expect_fail("hf header all NUL", dir, SOTTO_E_FORMAT, "model.safetensors", "JSON");
        memset(cp.p + 8, 0xff, (size_t)hlen);
        CHECK(write_file(p, cp.p, cp.n) == 0);
        expect_fail("hf header all 0xff", dir, SOTTO_E_FORMAT, "model.safetensors", "JSON");
        cp.p[8] = '[';
        cp.p[9] = ']';
        memset(cp.p + 10, ' ', (size_t)hlen - 2);
        CHECK(write_file(p, cp.p, cp.n) == 0);
        expect_fail("hf header a JSON array", dir, SOTTO_E_FORMAT, "model.safetensors", "JSON");
        free(cp.p);
    }
    free(img.p);

    cJSON *h;
    const char *fc1 = "model.encoder.layers.0.fc1.weight";
#define EDIT(label, code, what, ...)                        \
    do {                                                    \
        h = cJSON_Duplicate(good, 1);                       \
        __VA_ARGS__;                                        \
        hf_case(label, dir, h, data, code, what);           \
        cJSON_Delete(h);                                    \
    } while (0)

    /* dtypes */
    EDIT("hf dtype F64", SOTTO_E_UNSUPPORTED, fc1,
         cJSON_ReplaceItemInObjectCaseSensitive(entry(h, "enc.0.fc1.w"), "dtype", cJSON_CreateString("F64")));
    EDIT("hf dtype Q4", SOTTO_E_UNSUPPORTED, "unsupported",
         cJSON_ReplaceItemInObjectCaseSensitive(entry(h, "enc.0.fc1.w"), "dtype", cJSON_CreateString("Q4")));
    EDIT("hf dtype empty string", SOTTO_E_UNSUPPORTED, fc1,
         cJSON_ReplaceItemInObjectCaseSensitive(entry(h, "enc.0.fc1.w"), "dtype", cJSON_CreateString("")));
    EDIT("hf dtype I32", SOTTO_E_UNSUPPORTED, "model.encoder.conv1.bias",
         cJSON_ReplaceItemInObjectCaseSensitive(entry(h, "enc.conv1.b"), "dtype", cJSON_CreateString("I32")));
    EDIT("hf dtype a number", SOTTO_E_FORMAT, fc1,
         cJSON_ReplaceItemInObjectCaseSensitive(entry(h, "enc.0.fc1.w"), "dtype", cJSON_CreateNumber(1)));
    EDIT("hf dtype F32 for F16 data", SOTTO_E_FORMAT, "bytes",
         cJSON_ReplaceItemInObjectCaseSensitive(entry(h, "enc.0.fc1.w"), "dtype", cJSON_CreateString("F32")));

    /* shape vs bytes, wrong shapes */
    {
        const double s1[] = {SFF, SD + 1};
        EDIT("hf shape/bytes mismatch", SOTTO_E_FORMAT, "bytes", set_array(entry(h, "enc.0.fc1.w"), "shape", 2, s1));
        const double s2[] = {-SFF, SD};
        EDIT("hf negative dim", SOTTO_E_FORMAT, "shape", set_array(entry(h, "enc.0.fc1.w"), "shape", 2, s2));
        const double s3[] = {1e12, 2}; /* 2e12 elements > 2^40, no overflow */
        EDIT("hf huge shape", SOTTO_E_FORMAT, fc1, set_array(entry(h, "enc.0.fc1.w"), "shape", 2, s3));
        const double s4[] = {SFF * SD};
        EDIT("hf fc1 weight as a vector", SOTTO_E_FORMAT, "enc.0.fc1.w", set_array(entry(h, "enc.0.fc1.w"), "shape", 1, s4));
        const double s5[] = {SD, SFF}; /* transposed: same bytes */
        EDIT("hf fc1 weight transposed", SOTTO_E_FORMAT, "enc.0.fc1.w", set_array(entry(h, "enc.0.fc1.w"), "shape", 2, s5));
        const double s6[] = {SFF - 1, SD}; /* fewer rows, offsets cut to match */
        EDIT("hf fc1 weight [255 x 64]", SOTTO_E_FORMAT, "enc.0.fc1.w", {
            cJSON *e = entry(h, "enc.0.fc1.w");
            set_array(e, "shape", 2, s6);
            double o[2] = {offset_of(e, 0), offset_of(e, 0) + (SFF - 1) * SD * 2};
            set_array(e, "data_offsets", 2, o);
        });
        EDIT("hf shape not an array", SOTTO_E_FORMAT, fc1,
             cJSON_ReplaceItemInObjectCaseSensitive(entry(h, "enc.0.fc1.w"), "shape", cJSON_CreateString("256x64")));
        const double s7[] = {SD, SMELS, 3};
        EDIT("hf conv2 weight with conv1's shape", SOTTO_E_FORMAT, "model.encoder.conv2.weight", {
            cJSON *e = entry(h, "enc.conv2.w");
            set_array(e, "shape", 3, s7);
            double o[2] = {offset_of(e, 0), offset_of(e, 0) + SD * SMELS * 3 * 4};
            set_array(e, "data_offsets", 2, o);
        });
    }

    /* offsets */
    {
        cJSON *e0 = entry((cJSON *)good, "dec.ln.b");
        double b = offset_of(e0, 0), end = offset_of(e0, 1);
        const double o1[] = {b + (double)data->n, end + (double)data->n};
        EDIT("hf offsets past the end", SOTTO_E_FORMAT, "outside", set_array(entry(h, "dec.ln.b"), "data_offsets", 2, o1));
        const double o2[] = {-8, end - b - 8};
        EDIT("hf negative offset", SOTTO_E_FORMAT, "outside", set_array(entry(h, "dec.ln.b"), "data_offsets", 2, o2));
        const double o3[] = {end, b};
        EDIT("hf offsets reversed", SOTTO_E_FORMAT, "outside", set_array(entry(h, "dec.ln.b"), "data_offsets", 2, o3));
        const double o4[] = {b, end, end};
        EDIT("hf three offsets", SOTTO_E_FORMAT, "model.decoder.layer_norm.bias",
             set_array(entry(h, "dec.ln.b"), "data_offsets", 3, o4));
        EDIT("hf offsets missing", SOTTO_E_FORMAT, "model.decoder.layer_norm.bias",
             cJSON_DeleteItemFromObjectCaseSensitive(entry(h, "dec.ln.b"), "data_offsets"));
        EDIT("hf offsets strings", SOTTO_E_FORMAT, "model.decoder.layer_norm.bias", {
            cJSON *a = cJSON_CreateArray();
            cJSON_AddItemToArray(a, cJSON_CreateString("0"));
            cJSON_AddItemToArray(a, cJSON_CreateString("256"));
            cJSON_ReplaceItemInObjectCaseSensitive(entry(h, "dec.ln.b"), "data_offsets", a);
        });
        EDIT("hf entry not an object", SOTTO_E_FORMAT, "model.decoder.layer_norm.bias",
             cJSON_ReplaceItemInObjectCaseSensitive(h, "model.decoder.layer_norm.bias", cJSON_CreateNumber(3)));
    }

    /* missing / duplicate tensors, NaN */
    EDIT("hf missing cross V weight", SOTTO_E_NOTFOUND, "dec.0.cv.w",
         cJSON_DeleteItemFromObjectCaseSensitive(h, "model.decoder.layers.0.encoder_attn.v_proj.weight"));
    EDIT("hf missing embedding", SOTTO_E_NOTFOUND, "dec.emb",
         cJSON_DeleteItemFromObjectCaseSensitive(h, "model.decoder.embed_tokens.weight"));
    EDIT("hf missing q bias", SOTTO_E_NOTFOUND, "enc.0.q.b",
         cJSON_DeleteItemFromObjectCaseSensitive(h, "model.encoder.layers.0.self_attn.q_proj.bias"));
    EDIT("hf duplicate conv1 (with and without model.)", SOTTO_E_FORMAT, "twice",
         cJSON_AddItemToObject(h, "encoder.conv1.weight", cJSON_Duplicate(entry(h, "enc.conv1.w"), 1)));
    EDIT("hf tensor of a layer that does not exist", SOTTO_E_FORMAT, "model.encoder.layers.1.fc1.weight",
         cJSON_AddItemToObject(h, "model.encoder.layers.1.fc1.weight", cJSON_Duplicate(entry(h, "enc.0.fc1.w"), 1)));
    {
        bytes d2 = {0};
        bytes_put(&d2, data->p, data->n);
        cJSON *e = entry((cJSON *)good, "enc.0.o.w");
        float nan_bits;
        uint32_t u = 0x7fc00000u;
        memcpy(&nan_bits, &u, 4);
        memcpy(d2.p + (size_t)offset_of(e, 0) + 4 * 77, &nan_bits, 4);
        CHECK(st_write(dir, "model.safetensors", good, &d2) == 0);
        expect_fail("hf NaN in a float32 weight", dir, SOTTO_E_FORMAT, "model.encoder.layers.0.self_attn.out_proj.weight",
                    "non-finite");
        memcpy(d2.p + (size_t)offset_of(e, 0) + 4 * 77, data->p + (size_t)offset_of(e, 0) + 4 * 77, 4);
        e = entry((cJSON *)good, "dec.0.fc1.w");
        uint16_t inf16 = 0x7c00;
        memcpy(d2.p + (size_t)offset_of(e, 1) - 2, &inf16, 2);
        CHECK(st_write(dir, "model.safetensors", good, &d2) == 0);
        expect_fail("hf Inf in a float16 weight", dir, SOTTO_E_FORMAT, "model.decoder.layers.0.fc1.weight",
                    "non-finite");
        free(d2.p);
    }
#undef EDIT
    CHECK(st_write(dir, "model.safetensors", good, data) == 0);
}

static void test_hf_config(const char *dir) {
    static const char *fields[] = {"d_model", "encoder_layers", "encoder_attention_heads",
                                   "encoder_ffn_dim", "decoder_layers", "decoder_attention_heads",
                                   "decoder_ffn_dim", "num_mel_bins", "vocab_size",
                                   "max_source_positions", "max_target_positions"};
    char label[128];
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
        cJSON *c = syn_config();
        cJSON_DeleteItemFromObjectCaseSensitive(c, fields[i]);
        CHECK(write_json(dir, "config.json", c) == 0);
        snprintf(label, sizeof label, "hf config without %s", fields[i]);
        expect_fail(label, dir, SOTTO_E_FORMAT, "config.json", fields[i]);
        cJSON_AddItemToObject(c, fields[i], cJSON_CreateString("64"));
        CHECK(write_json(dir, "config.json", c) == 0);
        snprintf(label, sizeof label, "hf config %s a string", fields[i]);
        expect_fail(label, dir, SOTTO_E_FORMAT, "config.json", fields[i]);
        cJSON_DeleteItemFromObjectCaseSensitive(c, fields[i]);
        cJSON_AddNumberToObject(c, fields[i], 0);
        CHECK(write_json(dir, "config.json", c) == 0);
        snprintf(label, sizeof label, "hf config %s = 0", fields[i]);
        expect_fail(label, dir, SOTTO_E_FORMAT, "config.json", fields[i]);
        cJSON_Delete(c);
    }
    cJSON *c;
#define CFG(label, code, file, what, stmt)                  \
    do {                                                    \
        c = syn_config();                                   \
        stmt;                                               \
        CHECK(write_json(dir, "config.json", c) == 0);      \
        expect_fail(label, dir, code, file, what);          \
        cJSON_Delete(c);                                    \
    } while (0)
    CFG("hf model_type bert", SOTTO_E_UNSUPPORTED, "config.json", "bert",
        cJSON_ReplaceItemInObjectCaseSensitive(c, "model_type", cJSON_CreateString("bert")));
    CFG("hf d_model -64", SOTTO_E_FORMAT, "config.json", "d_model",
        cJSON_ReplaceItemInObjectCaseSensitive(c, "d_model", cJSON_CreateNumber(-64)));
    CFG("hf d_model 1e30", SOTTO_E_FORMAT, "config.json", "d_model",
        cJSON_ReplaceItemInObjectCaseSensitive(c, "d_model", cJSON_CreateNumber(1e30)));
    CFG("hf 1000 source positions", SOTTO_E_UNSUPPORTED, NULL, "1500",
        cJSON_ReplaceItemInObjectCaseSensitive(c, "max_source_positions", cJSON_CreateNumber(1000)));
    CFG("hf 3 heads for d_model 64", SOTTO_E_FORMAT, NULL, "divisible",
        cJSON_ReplaceItemInObjectCaseSensitive(c, "encoder_attention_heads", cJSON_CreateNumber(3)));
    CFG("hf 128 mels for 80-mel weights", SOTTO_E_FORMAT, "model.safetensors", "enc.conv1.w",
        cJSON_ReplaceItemInObjectCaseSensitive(c, "num_mel_bins", cJSON_CreateNumber(128)));
    CFG("hf vocab 51865 for a 51864 embedding", SOTTO_E_FORMAT, "model.safetensors", "dec.emb",
        cJSON_ReplaceItemInObjectCaseSensitive(c, "vocab_size", cJSON_CreateNumber(51865)));
    CFG("hf 2 encoder layers, 1 in the file", SOTTO_E_NOTFOUND, "model.safetensors", "enc.1.",
        cJSON_ReplaceItemInObjectCaseSensitive(c, "encoder_layers", cJSON_CreateNumber(2)));
    CFG("hf ffn 512, 256 in the file", SOTTO_E_FORMAT, "model.safetensors", "fc1",
        cJSON_ReplaceItemInObjectCaseSensitive(c, "decoder_ffn_dim", cJSON_CreateNumber(512)));
    CFG("hf 1000 layers", SOTTO_E_FORMAT, NULL, "implausible",
        cJSON_ReplaceItemInObjectCaseSensitive(c, "decoder_layers", cJSON_CreateNumber(1000)));
#undef CFG
    CHECK(write_text(dir, "config.json", "{\"model_type\": \"whisper\", \"d_model\": 64,") == 0);
    expect_fail("hf config.json truncated", dir, SOTTO_E_FORMAT, "config.json", "JSON");
    CHECK(write_text(dir, "config.json", "[]") == 0);
    expect_fail("hf config.json an array", dir, SOTTO_E_FORMAT, "config.json", "JSON");
    remove_file(dir, "config.json");
    expect_fail("hf config.json missing", dir, SOTTO_E_NOTFOUND, "config.json", NULL);
    c = syn_config();
    CHECK(write_json(dir, "config.json", c) == 0);
    cJSON_Delete(c);
}

static void test_hf_shards(const char *dir, const syn_model *s, float *ref_enc, float *ref_logits) {
    /* encoder tensors in one shard, decoder tensors in another */
    bytes da = {0}, db = {0};
    cJSON *ha = st_build(s, "enc.", &da), *hb = st_build(s, "dec.", &db);
    CHECK(st_write(dir, "model-00001-of-00002.safetensors", ha, &da) == 0);
    CHECK(st_write(dir, "model-00002-of-00002.safetensors", hb, &db) == 0);
    cJSON *idx = cJSON_CreateObject();
    cJSON *wm = cJSON_AddObjectToObject(idx, "weight_map");
    for (int k = 0; k < 2; k++) {
        const cJSON *it;
        cJSON_ArrayForEach(it, (k ? hb : ha)) {
            if (strcmp(it->string, "__metadata__") == 0) continue;
            cJSON_AddStringToObject(wm, it->string, k ? "model-00002-of-00002.safetensors"
                                                      : "model-00001-of-00002.safetensors");
        }
    }
    remove_file(dir, "model.safetensors");
    CHECK(write_json(dir, "model.safetensors.index.json", idx) == 0);
    sotto_model *m = expect_load("hf two shards", dir);
    if (m) {
        CHECK_STR(sotto_model_format_name(m), "hf");
        float *enc = NULL, *logits = NULL;
        if (run_model(m, &enc, &logits) == 0 && ref_enc && ref_logits) {
            CHECK_MSG(max_diff(enc, ref_enc, (size_t)SACTX * SD) == 0.0, "sharded encoder output differs");
            CHECK_MSG(max_diff(logits, ref_logits, SVOCAB) == 0.0, "sharded logits differ");
        }
        free(enc);
        free(logits);
        sotto_model_free(m);
    }
    /* a shard that is missing, a bad index */
    remove_file(dir, "model-00002-of-00002.safetensors");
    expect_fail("hf shard missing", dir, SOTTO_E_NOTFOUND, "model-00002-of-00002.safetensors", NULL);
    CHECK(write_text(dir, "model.safetensors.index.json", "{\"weight_map\": [1, 2]}") == 0);
    expect_fail("hf index without weight_map object", dir, SOTTO_E_FORMAT, "index.json", "weight_map");
    CHECK(write_text(dir, "model.safetensors.index.json", "{\"weight_map\": {\"a\": \"../x.safetensors\"}}") == 0);
    expect_fail("hf index shard with a path", dir, SOTTO_E_FORMAT, "index.json", "shard");
    CHECK(write_text(dir, "model.safetensors.index.json", "{\"weight_map\": {") == 0);
    expect_fail("hf index truncated", dir, SOTTO_E_FORMAT, "index.json", NULL);
    CHECK(write_text(dir, "model.safetensors.index.json", "{\"weight_map\": {}}") == 0);
    expect_fail("hf index empty weight_map", dir, SOTTO_E_NOTFOUND, NULL, "missing tensor");
    remove_file(dir, "model.safetensors.index.json");
    remove_file(dir, "model-00001-of-00002.safetensors");
    cJSON_Delete(ha);
    cJSON_Delete(hb);
    cJSON_Delete(idx);
    free(da.p);
    free(db.p);
}

static void test_hf(void) {
    char dir[256], ctdir[256], p[2048];
    syn_model s;
    syn_build(&s);
    int ok = s.n > 0;
    for (int i = 0; i < s.n; i++) ok &= s.t[i].v != NULL;
    CHECK_MSG(ok, "out of memory for the synthetic model");
    if (!ok || make_tmpdir(dir, sizeof dir) || make_tmpdir(ctdir, sizeof ctdir)) {
        syn_free(&s);
        return;
    }
    /* Hugging Face layout: config.json, model.safetensors, tokenizer.json */
    char a[2048];
    snprintf(a, sizeof a, "%s/models/tiny.en/tokenizer.json", g_src);
    join(p, sizeof p, dir, "tokenizer.json");
    CHECK(copy_file(a, p) == 0);
    cJSON *cfg = syn_config();
    CHECK(write_json(dir, "config.json", cfg) == 0);
    cJSON_Delete(cfg);
    bytes data = {0};
    cJSON *good = st_build(&s, NULL, &data);
    CHECK(st_write(dir, "model.safetensors", good, &data) == 0);

    /* the same weights as a CTranslate2 model.bin */
    CHECK(copy_tokenizer(ctdir, 0) == 0);
    join(p, sizeof p, ctdir, "model.bin");
    CHECK(ct2_write_syn(p, &s) == 0);

    float *hf_enc = NULL, *hf_logits = NULL, *ct_enc = NULL, *ct_logits = NULL;
    sotto_model *m = expect_load("hf synthetic", dir);
    if (m) {
        CHECK_STR(sotto_model_format_name(m), "hf");
        check_synthetic_values("hf synthetic", m, &s);
        CHECK(m->enc[0].k.b == NULL || m->enc[0].k.b[0] == 0.0f);
        CHECK(run_model(m, &hf_enc, &hf_logits) == 0);
        sotto_model_free(m);
    }
    m = expect_load("ct2 synthetic", ctdir);
    if (m) {
        CHECK_STR(sotto_model_format_name(m), "ct2");
        check_synthetic_values("ct2 synthetic", m, &s);
        CHECK(run_model(m, &ct_enc, &ct_logits) == 0);
        sotto_model_free(m);
    }
    if (hf_enc && ct_enc) {
        int finite = 1;
        for (size_t i = 0; i < (size_t)SACTX * SD; i++) finite &= isfinite(hf_enc[i]) != 0;
        for (size_t i = 0; i < SVOCAB; i++) finite &= isfinite(hf_logits[i]) != 0;
        CHECK_MSG(finite, "synthetic model: non-finite encoder output or logits");
        double de = max_diff(hf_enc, ct_enc, (size_t)SACTX * SD);
        double dl = max_diff(hf_logits, ct_logits, SVOCAB);
        CHECK_MSG(de <= 1e-5, "HF vs CT2 encoder output: max |diff| %g", de);
        CHECK_MSG(dl <= 1e-4, "HF vs CT2 logits: max |diff| %g", dl);
        printf("synthetic model: HF vs CT2 max |diff|: encoder %.3g, logits %.3g\n", de, dl);
    }
    /* an explicit format must be honoured */
    {
        sotto_err err;
        sotto_err_clear(&err);
        sotto_model_params mp = sotto_model_default_params();
        mp.format = SOTTO_MODEL_FORMAT_CT2;
        m = sotto_model_load(dir, &mp, &err);
        CHECK_MSG(m == NULL && err.code == SOTTO_E_NOTFOUND && strstr(err.msg, "model.bin"),
                  "HF dir loaded as CT2: %s", err.msg);
        sotto_model_free(m);
        mp.format = SOTTO_MODEL_FORMAT_HF;
        m = sotto_model_load(ctdir, &mp, &err);
        CHECK_MSG(m == NULL && err.code != 0, "CT2 dir loaded as HF");
        sotto_model_free(m);
    }

    test_hf_damaged(dir, good, &data);
    test_hf_config(dir);
    test_hf_shards(dir, &s, hf_enc, hf_logits);

    /* still loads after all that (the files were restored) */
    CHECK(st_write(dir, "model.safetensors", good, &data) == 0);
    m = expect_load("hf synthetic, restored", dir);
    sotto_model_free(m);

    free(hf_enc);
    free(hf_logits);
    free(ct_enc);
    free(ct_logits);
    cJSON_Delete(good);
    free(data.p);
    syn_free(&s);
    rm_tree(dir);
    rm_tree(ctdir);
}

/* Inputs whose size arithmetic overflows or that map to no memory at all:
 * kept last because, under UBSan with -fno-sanitize-recover, undefined
 * behaviour in the loader aborts the whole test. */
static void test_arithmetic_edges(void) {
    char dir[256], hdir[256], bin[1100], p[2048];
    if (make_tmpdir(dir, sizeof dir)) {
        CHECK(0);
        return;
    }
    CHECK(copy_tokenizer(dir, 0) == 0);
    CHECK(write_text(dir, "model.bin", "") == 0);
    expect_fail("ct2 empty model.bin", dir, SOTTO_E_FORMAT, "model.bin", "empty");

    /* dims whose product wraps around 2^64 to 0, with n_bytes 0 */
    snprintf(bin, sizeof bin, "%s/models/tiny.en/model.bin", g_src);
    sotto_mapfile mf;
    sotto_err err = {0};
    ct2_index ix;
    memset(&ix, 0, sizeof ix);
    if (sotto_mapfile_open(bin, &mf, &err) == 0) {
        if (ct2_index_build(&ix, mf.data, mf.size) == 0) {
            ct2_edit e = ct2_noedit();
            e.var = "encoder/conv1/bias";
            e.rank = 3;
            e.dims[0] = 1u << 20;
            e.dims[1] = 1u << 20;
            e.dims[2] = 1u << 24;
            e.resize = 1;
            ct2_case("ct2 dims product wrapping to 0", dir, &ix, &e, SOTTO_E_FORMAT,
                     "encoder/conv1/bias");
            e.var = "encoder/layer_0/ffn/layer_norm/beta";
            e.dims[0] = 0xffffffffu;
            e.dims[1] = 0xffffffffu;
            e.dims[2] = 0xffffffffu;
            e.resize = 0; /* rejected before n_bytes is read */
            ct2_case("ct2 dims 3 x (2^32-1)", dir, &ix, &e, SOTTO_E_FORMAT, "layer_norm/beta");
        }
        free(ix.vars);
        sotto_mapfile_close(&mf);
    } else {
        CHECK_MSG(0, "cannot open %s: %s", bin, err.msg);
    }
    rm_tree(dir);

    /* safetensors shape whose element count overflows int64 */
    if (make_tmpdir(hdir, sizeof hdir)) {
        CHECK(0);
        return;
    }
    char a[2048];
    snprintf(a, sizeof a, "%s/models/tiny.en/tokenizer.json", g_src);
    join(p, sizeof p, hdir, "tokenizer.json");
    CHECK(copy_file(a, p) == 0);
    cJSON *cfg = syn_config();
    CHECK(write_json(hdir, "config.json", cfg) == 0);
    cJSON_Delete(cfg);
    syn_model s;
    syn_build(&s);
    bytes data = {0};
    cJSON *h = st_build(&s, NULL, &data);
    cJSON *shape = cJSON_CreateArray();
    for (int k = 0; k < 3; k++) cJSON_AddItemToArray(shape, cJSON_CreateNumber(1e12));
    cJSON_ReplaceItemInObjectCaseSensitive(entry(h, "enc.0.fc1.w"), "shape", shape);
    hf_case("hf shape 1e12 x 1e12 x 1e12", hdir, h, &data, SOTTO_E_FORMAT,
            "model.encoder.layers.0.fc1.weight");
    cJSON_Delete(h);
    free(data.p);
    syn_free(&s);
    rm_tree(hdir);
}

int main(void) {
    const char *src = getenv("SOTTO_SOURCE_DIR");
    snprintf(g_src, sizeof g_src, "%s", src && *src ? src : ".");
    const char *v = getenv("SOTTO_TEST_VERBOSE");
    g_verbose = v && *v && strcmp(v, "0") != 0;
    test_real_models();
    test_ct2();
    test_hf();
    test_arithmetic_edges();
    return check_report();
}
