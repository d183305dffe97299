/* policy.c - per-part weight formats (see policy.h). */
#include "policy.h"

#include <stdio.h>
#include <string.h>

static const char *const k_part_names[SOTTO_POLICY_COUNT] = {
    "encoder.attn", "encoder.mlp", "decoder.attn", "decoder.cross", "decoder.mlp", "embed"};

const char *sotto_policy_part_name(sotto_policy_part part) {
    return part < SOTTO_POLICY_COUNT ? k_part_names[part] : "?";
}

static int is_4bit(sotto_wfmt f) { return f == SOTTO_WFMT_NF4 || f == SOTTO_WFMT_NVFP4; }

sotto_wfmt sotto_policy_fmt(const sotto_policy *p, int part, int layer) {
    if (part < 0 || part >= SOTTO_POLICY_COUNT) return SOTTO_WFMT_F32;
    if (part == SOTTO_POLICY_EMBED || layer < 0 || layer >= SOTTO_POLICY_MAX_LAYERS ||
        !p->layer_fmt[part][layer])
        return p->fmt[part];
    return (sotto_wfmt)(p->layer_fmt[part][layer] - 1);
}

void sotto_policy_set(sotto_policy *p, int part, int layer, sotto_wfmt f) {
    if (part < 0 || part >= SOTTO_POLICY_COUNT || layer >= SOTTO_POLICY_MAX_LAYERS) return;
    if (layer < 0 || part == SOTTO_POLICY_EMBED) {
        p->fmt[part] = f;
        if (part != SOTTO_POLICY_EMBED) memset(p->layer_fmt[part], 0, sizeof p->layer_fmt[part]);
        return;
    }
    /* a layer in its part's format is stored as "the part's": one form per policy */
    p->layer_fmt[part][layer] = f == p->fmt[part] ? 0 : (unsigned char)(f + 1);
}

int sotto_policy_equal(const sotto_policy *a, const sotto_policy *b) {
    for (int i = 0; i < SOTTO_POLICY_COUNT; i++)
        for (int l = -1; l < (i == SOTTO_POLICY_EMBED ? 0 : SOTTO_POLICY_MAX_LAYERS); l++)
            if (sotto_policy_fmt(a, i, l) != sotto_policy_fmt(b, i, l)) return 0;
    return 1;
}

static int part_side(int part) {
    return part == SOTTO_POLICY_ENC_ATTN || part == SOTTO_POLICY_ENC_MLP ? 0 : 1;
}

int sotto_policy_max_layer(const sotto_policy *p, int side) {
    int max = -1;
    for (int i = 0; i < SOTTO_POLICY_EMBED; i++)
        if (part_side(i) == side)
            for (int l = 0; l < SOTTO_POLICY_MAX_LAYERS; l++)
                if (p->layer_fmt[i][l] && l > max) max = l;
    return max;
}

void sotto_policy_compact(sotto_policy *p, int n_enc, int n_dec) {
    for (int i = 0; i < SOTTO_POLICY_EMBED; i++) {
        int n = part_side(i) ? n_dec : n_enc;
        if (n <= 0 || n > SOTTO_POLICY_MAX_LAYERS) continue;
        sotto_wfmt f = sotto_policy_fmt(p, i, 0);
        int same = 1;
        for (int l = 1; l < n && same; l++) same = sotto_policy_fmt(p, i, l) == f;
        if (same) sotto_policy_set(p, i, -1, f);
    }
}

sotto_policy sotto_policy_uniform(sotto_wfmt weights) {
    sotto_policy p;
    memset(&p, 0, sizeof p);
    for (int i = 0; i < SOTTO_POLICY_COUNT; i++) p.fmt[i] = weights;
    if (is_4bit(weights)) p.fmt[SOTTO_POLICY_EMBED] = SOTTO_WFMT_Q8;
    return p;
}

/* What a 4-bit default keeps at Q8, per format and model size, as override
 * strings on top of the uniform preset: the cheapest set (in bytes) whose
 * dev-set WER was within the paired-bootstrap 95% CI of f32 with no looping
 * clip (docs/PERF.md, "4-bit defaults by measurement"). Sizes not measured
 * take the nearest measured size's rule. tests/test_policy.c checks that
 * each string parses. */
typedef struct keep_rule {
    int max_state;           /* models up to this encoder width */
    const char *nf4, *nvfp4; /* overrides on top of uniform */
} keep_rule;

static const keep_rule k_keep[] = {
    /* tiny (384): nf4 keeps the cross-attention at Q8, nvfp4 the encoder MLP */
    {384, "decoder.cross=q8", "encoder.mlp=q8"},
    /* base (512): the same parts. Greedy with fallback, uniform was already
     * within the CI (nf4 +0.56, nvfp4 +0.16 pp) and these Q8 parts lowered
     * it (+0.44, +0.08) for 3.5 / 7.1 MB; with beam 5 they are -0.04 and
     * +0.28 pp. Larger models (not measured) take base's rule. */
    {1 << 30, "decoder.cross=q8", "encoder.mlp=q8"},
};

sotto_policy sotto_policy_default_for(sotto_wfmt weights, int n_state) {
    sotto_policy p = sotto_policy_uniform(weights);
    if (!is_4bit(weights) || n_state <= 0) return p;
    const keep_rule *r = &k_keep[0];
    while (n_state > r->max_state) r++;
    sotto_err err;
    /* (the strings are this file's own; test_policy holds them to parse) */
    (void)sotto_policy_apply(&p, weights == SOTTO_WFMT_NF4 ? r->nf4 : r->nvfp4, &err);
    return p;
}

int sotto_policy_resolve(sotto_policy *out, sotto_wfmt weights, int n_state, const char *spec,
                         sotto_err *err) {
    static const struct {
        const char *name;
        int uniform;
    } presets[] = {{"default", 0}, {"uniform", 1}};
    int uniform = 0;
    if (spec) {
        for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++) {
            size_t n = strlen(presets[i].name);
            if (strncmp(spec, presets[i].name, n) == 0 && (spec[n] == '\0' || spec[n] == ',')) {
                uniform = presets[i].uniform;
                if (spec[n] == ',' && spec[n + 1] == '\0')
                    return sotto_err_set(err, SOTTO_E_INVALID,
                                         "policy '%s' ends with a comma", spec);
                spec += n + (spec[n] == ',');
                break;
            }
        }
    }
    *out = uniform ? sotto_policy_uniform(weights) : sotto_policy_default_for(weights, n_state);
    return sotto_policy_apply(out, spec, err);
}

int sotto_policy_has_4bit(const sotto_policy *p) {
    for (int i = 0; i < SOTTO_POLICY_COUNT; i++)
        for (int l = -1; l < (i == SOTTO_POLICY_EMBED ? 0 : SOTTO_POLICY_MAX_LAYERS); l++)
            if (is_4bit(sotto_policy_fmt(p, i, l))) return 1;
    return 0;
}

/* Parts a key covers, the layer it names (-1: every layer), and how
 * specific it is: 0 all, 1 side, 2 part, 3 side.N, 4 side.N.part. */
static int key_parts(const char *key, size_t len, int parts[SOTTO_POLICY_COUNT], int *layer,
                     int *rank) {
    int n = 0;
    *layer = -1;
#define KEY(s) (len == strlen(s) && strncmp(key, s, len) == 0)
    if (KEY("all")) {
        *rank = 0;
        for (int i = 0; i < SOTTO_POLICY_EMBED; i++) parts[n++] = i;
        return n;
    }
    for (int i = 0; i < SOTTO_POLICY_COUNT; i++)
        if (KEY(k_part_names[i]) || (i == SOTTO_POLICY_EMBED && KEY("proj_out"))) {
            *rank = 2;
            parts[n++] = i;
            return n;
        }
#undef KEY
    /* side, side.N or side.N.part */
    static const char *const sides[2] = {"encoder", "decoder"};
    for (int side = 0; side < 2; side++) {
        size_t sl = strlen(sides[side]);
        if (len < sl || strncmp(key, sides[side], sl) != 0) continue;
        const char *rest = key + sl, *end = key + len;
        const char *part = NULL; /* the part name after "side.N." */
        if (rest == end) {
            *rank = 1;
        } else {
            if (*rest != '.' || rest + 1 == end || rest[1] < '0' || rest[1] > '9') return 0;
            int l = 0;
            const char *d = rest + 1;
            while (d < end && *d >= '0' && *d <= '9' && l < SOTTO_POLICY_MAX_LAYERS)
                l = l * 10 + (*d++ - '0');
            if (l >= SOTTO_POLICY_MAX_LAYERS || (d - rest > 2 && rest[1] == '0')) return 0;
            *layer = l;
            *rank = 3;
            if (d != end) {
                if (*d != '.' || d + 1 == end) return 0;
                part = d + 1;
                *rank = 4;
            }
        }
        for (int i = 0; i < SOTTO_POLICY_EMBED; i++) {
            if (part_side(i) != side) continue;
            if (part) {
                /* "attn" of "encoder.attn": the name after the side's dot */
                const char *pn = k_part_names[i] + sl + 1;
                if (strlen(pn) != (size_t)(end - part) || strncmp(part, pn, strlen(pn)) != 0)
                    continue;
            }
            parts[n++] = i;
        }
        return n;
    }
    return 0;
}

int sotto_policy_apply(sotto_policy *p, const char *overrides, sotto_err *err) {
    if (!overrides || !*overrides) return SOTTO_OK;
    /* One pass over the items per rank so that specific keys win. */
    for (int want_rank = 0; want_rank <= 4; want_rank++) {
        const char *s = overrides;
        while (*s) {
            const char *end = strchr(s, ',');
            size_t len = end ? (size_t)(end - s) : strlen(s);
            const char *eq = memchr(s, '=', len);
            if (!eq)
                return sotto_err_set(err, SOTTO_E_INVALID,
                                     "policy item '%.*s' is not part=format (a preset, "
                                     "default or uniform, may only come first)",
                                     (int)len, s);
            char fmt_name[16];
            size_t fl = len - (size_t)(eq + 1 - s);
            if (fl == 0 || fl >= sizeof fmt_name)
                return sotto_err_set(err, SOTTO_E_INVALID, "policy item '%.*s' has no format",
                                     (int)len, s);
            memcpy(fmt_name, eq + 1, fl);
            fmt_name[fl] = '\0';
            sotto_wfmt f;
            if (sotto_wfmt_parse(fmt_name, &f))
                return sotto_err_set(err, SOTTO_E_INVALID,
                                     "unknown weight format '%s' (f32, bf16, q8, nf4, nvfp4)",
                                     fmt_name);
            int parts[SOTTO_POLICY_COUNT], layer, rank;
            int np = key_parts(s, (size_t)(eq - s), parts, &layer, &rank);
            if (np == 0)
                return sotto_err_set(err, SOTTO_E_INVALID,
                                     "unknown model part '%.*s' (all, encoder, decoder, "
                                     "encoder.attn, encoder.mlp, decoder.attn, decoder.cross, "
                                     "decoder.mlp, embed; per layer encoder.N, decoder.N, "
                                     "encoder.N.mlp, decoder.N.cross, ...; N from 0 to %d)",
                                     (int)(eq - s), s, SOTTO_POLICY_MAX_LAYERS - 1);
            if (rank == want_rank)
                for (int i = 0; i < np; i++) sotto_policy_set(p, parts[i], layer, f);
            s = end ? end + 1 : s + len;
        }
    }
    return SOTTO_OK;
}

int sotto_policy_part_of(const char *name, int *layer_out) {
    if (layer_out) *layer_out = -1;
    if (strcmp(name, "dec.emb") == 0) return SOTTO_POLICY_EMBED;
    int layer, n = 0;
    char side[4], kind[8];
    if (sscanf(name, "%3[a-z].%d.%7[a-z0-9].w%n", side, &layer, kind, &n) != 3 || name[n] != '\0')
        return -1;
    if (layer_out) *layer_out = layer;
    int enc = strcmp(side, "enc") == 0;
    if (!enc && strcmp(side, "dec") != 0) return -1;
    if (!strcmp(kind, "fc1") || !strcmp(kind, "fc2"))
        return enc ? SOTTO_POLICY_ENC_MLP : SOTTO_POLICY_DEC_MLP;
    if (!strcmp(kind, "q") || !strcmp(kind, "k") || !strcmp(kind, "v") || !strcmp(kind, "o"))
        return enc ? SOTTO_POLICY_ENC_ATTN : SOTTO_POLICY_DEC_ATTN;
    if (!enc && (!strcmp(kind, "cq") || !strcmp(kind, "ck") || !strcmp(kind, "cv") ||
                 !strcmp(kind, "co")))
        return SOTTO_POLICY_DEC_CROSS;
    return -1;
}

void sotto_policy_format(const sotto_policy *p, char *buf, size_t bufsz) {
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; i < SOTTO_POLICY_COUNT && used < bufsz; i++) {
        int w = snprintf(buf + used, bufsz - used, "%s%s=%s", i ? "," : "", k_part_names[i],
                         sotto_wfmt_name(p->fmt[i]));
        if (w < 0) break;
        used += (size_t)w;
    }
    for (int i = 0; i < SOTTO_POLICY_EMBED && used < bufsz; i++)
        for (int l = 0; l < SOTTO_POLICY_MAX_LAYERS && used < bufsz; l++) {
            if (!p->layer_fmt[i][l]) continue;
            const char *name = k_part_names[i], *dot = strchr(name, '.');
            int w = snprintf(buf + used, bufsz - used, ",%.*s.%d.%s=%s", (int)(dot - name), name,
                             l, dot + 1, sotto_wfmt_name(sotto_policy_fmt(p, i, l)));
            if (w < 0) break;
            used += (size_t)w;
        }
}
