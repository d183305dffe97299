/* test_policy.c - per-part weight formats: defaults, overrides and their
 * precedence, errors, tensor-to-part mapping; and quantized loads of the
 * real tiny.en through the engine API (formats per part, bytes, the
 * refusal of formats that do not fit). */
#include "check.h"
#include "model.h"
#include "policy.h"

#include <stdlib.h>
#include <string.h>

static void test_defaults_and_overrides(void) {
    sotto_policy p = sotto_policy_uniform(SOTTO_WFMT_NF4);
    for (int i = 0; i < SOTTO_POLICY_EMBED; i++) CHECK(p.fmt[i] == SOTTO_WFMT_NF4);
    CHECK(p.fmt[SOTTO_POLICY_EMBED] == SOTTO_WFMT_Q8); /* embedding stays >= 8 bits */
    CHECK(sotto_policy_has_4bit(&p));
    p = sotto_policy_uniform(SOTTO_WFMT_BF16);
    CHECK(p.fmt[SOTTO_POLICY_EMBED] == SOTTO_WFMT_BF16 && !sotto_policy_has_4bit(&p));

    sotto_err err;
    p = sotto_policy_uniform(SOTTO_WFMT_F32);
    /* specific keys win whatever their order */
    CHECK(sotto_policy_apply(&p, "decoder.mlp=q8,decoder=nvfp4,all=bf16", &err) == 0);
    CHECK(p.fmt[SOTTO_POLICY_ENC_ATTN] == SOTTO_WFMT_BF16);
    CHECK(p.fmt[SOTTO_POLICY_ENC_MLP] == SOTTO_WFMT_BF16);
    CHECK(p.fmt[SOTTO_POLICY_DEC_ATTN] == SOTTO_WFMT_NVFP4);
    CHECK(p.fmt[SOTTO_POLICY_DEC_CROSS] == SOTTO_WFMT_NVFP4);
    CHECK(p.fmt[SOTTO_POLICY_DEC_MLP] == SOTTO_WFMT_Q8);
    CHECK(p.fmt[SOTTO_POLICY_EMBED] == SOTTO_WFMT_F32); /* "all" leaves the embedding */
    CHECK(sotto_policy_apply(&p, "embed=nf4", &err) == 0 && p.fmt[SOTTO_POLICY_EMBED] == SOTTO_WFMT_NF4);
    CHECK(sotto_policy_apply(&p, NULL, &err) == 0 && sotto_policy_apply(&p, "", &err) == 0);

    char buf[256];
    sotto_policy_format(&p, buf, sizeof buf);
    CHECK_STR(buf, "encoder.attn=bf16,encoder.mlp=bf16,decoder.attn=nvfp4,decoder.cross=nvfp4,"
                   "decoder.mlp=q8,embed=nf4");
    /* the printed form parses back to the same policy */
    sotto_policy r = sotto_policy_uniform(SOTTO_WFMT_F32);
    CHECK(sotto_policy_apply(&r, buf, &err) == 0 && sotto_policy_equal(&r, &p));

    const char *bad[] = {"encoder", "encoder=", "encoder=int3", "tail=nf4", "=nf4", "encoder=nf4,,"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        sotto_policy q = sotto_policy_uniform(SOTTO_WFMT_F32);
        int rc = sotto_policy_apply(&q, bad[i], &err);
        CHECK_MSG(rc == SOTTO_E_INVALID && err.msg[0], "'%s' accepted", bad[i]);
    }
}

/* Per-layer keys: precedence over part keys, part keys clearing a preset's
 * layers, the printed form, compaction, errors. */
static void test_layers(void) {
    sotto_err err;
    sotto_policy p = sotto_policy_uniform(SOTTO_WFMT_NF4);
    CHECK(sotto_policy_apply(&p, "decoder.1.cross=q8,encoder.0=bf16,encoder.0.mlp=f32,"
                                 "decoder.cross=nvfp4,decoder.3=q8", &err) == 0);
    CHECK(sotto_policy_fmt(&p, SOTTO_POLICY_ENC_ATTN, 0) == SOTTO_WFMT_BF16);
    CHECK(sotto_policy_fmt(&p, SOTTO_POLICY_ENC_MLP, 0) == SOTTO_WFMT_F32); /* N.part beats N */
    CHECK(sotto_policy_fmt(&p, SOTTO_POLICY_ENC_ATTN, 1) == SOTTO_WFMT_NF4);
    CHECK(sotto_policy_fmt(&p, SOTTO_POLICY_DEC_CROSS, 1) == SOTTO_WFMT_Q8); /* layer beats part */
    CHECK(sotto_policy_fmt(&p, SOTTO_POLICY_DEC_CROSS, 0) == SOTTO_WFMT_NVFP4);
    CHECK(sotto_policy_fmt(&p, SOTTO_POLICY_DEC_CROSS, 3) == SOTTO_WFMT_Q8);
    CHECK(sotto_policy_fmt(&p, SOTTO_POLICY_DEC_MLP, 3) == SOTTO_WFMT_Q8);
    CHECK(sotto_policy_fmt(&p, SOTTO_POLICY_DEC_MLP, 2) == SOTTO_WFMT_NF4);
    CHECK(sotto_policy_fmt(&p, SOTTO_POLICY_DEC_MLP, -1) == SOTTO_WFMT_NF4);
    CHECK(sotto_policy_max_layer(&p, 0) == 0 && sotto_policy_max_layer(&p, 1) == 3);
    char buf[512];
    sotto_policy_format(&p, buf, sizeof buf);
    CHECK_STR(buf, "encoder.attn=nf4,encoder.mlp=nf4,decoder.attn=nf4,decoder.cross=nvfp4,"
                   "decoder.mlp=nf4,embed=q8,encoder.0.attn=bf16,encoder.0.mlp=f32,"
                   "decoder.3.attn=q8,decoder.1.cross=q8,decoder.3.cross=q8,decoder.3.mlp=q8");
    sotto_policy r = sotto_policy_uniform(SOTTO_WFMT_F32);
    CHECK(sotto_policy_apply(&r, buf, &err) == 0 && sotto_policy_equal(&r, &p));
    CHECK(memcmp(&r, &p, sizeof r) == 0); /* one stored form per policy */
    r.layer_fmt[SOTTO_POLICY_ENC_ATTN][2] = SOTTO_WFMT_Q8 + 1;
    CHECK(!sotto_policy_equal(&r, &p));
    /* a part-wide override clears the layers a preset gave that part */
    CHECK(sotto_policy_apply(&p, "decoder.cross=nf4", &err) == 0);
    CHECK(sotto_policy_fmt(&p, SOTTO_POLICY_DEC_CROSS, 1) == SOTTO_WFMT_NF4);
    CHECK(sotto_policy_fmt(&p, SOTTO_POLICY_DEC_MLP, 3) == SOTTO_WFMT_Q8);
    /* ...and "all" clears every layer entry */
    CHECK(sotto_policy_apply(&p, "all=q8", &err) == 0 && sotto_policy_max_layer(&p, 0) == -1 &&
          sotto_policy_max_layer(&p, 1) == -1 && !sotto_policy_has_4bit(&p));
    /* one 4-bit layer is a 4-bit policy */
    CHECK(sotto_policy_apply(&p, "encoder.2.mlp=nvfp4", &err) == 0 && sotto_policy_has_4bit(&p));
    /* compaction: every layer alike reads as the part */
    p = sotto_policy_uniform(SOTTO_WFMT_NF4);
    CHECK(sotto_policy_apply(&p, "decoder.0.mlp=q8,decoder.1.mlp=q8,encoder.1.attn=q8", &err) == 0);
    sotto_policy c = p;
    sotto_policy_compact(&c, 4, 2);
    CHECK(sotto_policy_fmt(&c, SOTTO_POLICY_ENC_ATTN, 1) == SOTTO_WFMT_Q8 &&
          sotto_policy_fmt(&c, SOTTO_POLICY_ENC_ATTN, 0) == SOTTO_WFMT_NF4 &&
          c.fmt[SOTTO_POLICY_DEC_MLP] == SOTTO_WFMT_Q8 &&
          sotto_policy_max_layer(&c, 1) == -1 && sotto_policy_max_layer(&c, 0) == 1);
    const char *bad[] = {"encoder.x=q8", "encoder.=q8", "encoder.1.=q8", "encoder.1.cross=q8",
                         "decoder.2.fc1=q8", "encoder.64=q8", "encoder.01=q8", "decoder.1x=q8",
                         "embed.0=q8", "encoder.999999999999=q8", "encoder-1=q8"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        sotto_policy q = sotto_policy_uniform(SOTTO_WFMT_F32);
        int rc = sotto_policy_apply(&q, bad[i], &err);
        CHECK_MSG(rc == SOTTO_E_INVALID && err.msg[0], "'%s' accepted", bad[i]);
    }
    CHECK(sotto_policy_apply(&p, "encoder.63=q8", &err) == 0);
}

static void test_parts(void) {
    int layer = 7;
    CHECK(sotto_policy_part_of("dec.12.fc1.w", &layer) == SOTTO_POLICY_DEC_MLP && layer == 12);
    CHECK(sotto_policy_part_of("dec.emb", &layer) == SOTTO_POLICY_EMBED && layer == -1);
    CHECK_EQ_INT(sotto_policy_part_of("enc.3.q.w", NULL), SOTTO_POLICY_ENC_ATTN);
    CHECK_EQ_INT(sotto_policy_part_of("enc.0.fc2.w", NULL), SOTTO_POLICY_ENC_MLP);
    CHECK_EQ_INT(sotto_policy_part_of("dec.1.o.w", NULL), SOTTO_POLICY_DEC_ATTN);
    CHECK_EQ_INT(sotto_policy_part_of("dec.1.ck.w", NULL), SOTTO_POLICY_DEC_CROSS);
    CHECK_EQ_INT(sotto_policy_part_of("dec.12.fc1.w", NULL), SOTTO_POLICY_DEC_MLP);
    CHECK_EQ_INT(sotto_policy_part_of("dec.emb", NULL), SOTTO_POLICY_EMBED);
    const char *dense[] = {"enc.conv1.w", "enc.pos", "dec.pos", "enc.0.q.b", "dec.0.attn_ln.g",
                           "enc.ln.g", "enc.0.cq.w", "dec.0.fc1.wx"};
    for (size_t i = 0; i < sizeof dense / sizeof dense[0]; i++)
        CHECK_MSG(sotto_policy_part_of(dense[i], NULL) == -1, "%s is not dense", dense[i]);
}

static void test_presets(void) {
    sotto_err err;
    sotto_policy p, u = sotto_policy_uniform(SOTTO_WFMT_NF4);
    const sotto_wfmt fmts[] = {SOTTO_WFMT_F32, SOTTO_WFMT_BF16, SOTTO_WFMT_Q8, SOTTO_WFMT_NF4,
                               SOTTO_WFMT_NVFP4};
    const int widths[] = {0, 384, 512, 768, 1024, 1280};
    for (int f = 0; f < 5; f++)
        for (int w = 0; w < 6; w++) {
            sotto_policy d = sotto_policy_default_for(fmts[f], widths[w]);
            sotto_policy un = sotto_policy_uniform(fmts[f]);
            int four = fmts[f] == SOTTO_WFMT_NF4 || fmts[f] == SOTTO_WFMT_NVFP4;
            /* 8 bits and more, or an unknown size: the default is uniform */
            if (!four || widths[w] == 0)
                CHECK_MSG(memcmp(&d, &un, sizeof d) == 0, "%s width %d", sotto_wfmt_name(fmts[f]),
                          widths[w]);
            /* 4-bit defaults: each part in the format or at q8, the embedding at q8,
             * and something still in 4 bits */
            for (int i = 0; four && i < SOTTO_POLICY_COUNT; i++)
                CHECK(d.fmt[i] == fmts[f] || d.fmt[i] == SOTTO_WFMT_Q8);
            CHECK(!four || (d.fmt[SOTTO_POLICY_EMBED] == SOTTO_WFMT_Q8 && sotto_policy_has_4bit(&d)));
            /* resolve: "" and "default" give the default, "uniform" the uniform preset */
            CHECK(sotto_policy_resolve(&p, fmts[f], widths[w], NULL, &err) == 0 &&
                  memcmp(&p, &d, sizeof p) == 0);
            CHECK(sotto_policy_resolve(&p, fmts[f], widths[w], "default", &err) == 0 &&
                  memcmp(&p, &d, sizeof p) == 0);
            CHECK(sotto_policy_resolve(&p, fmts[f], widths[w], "uniform", &err) == 0 &&
                  memcmp(&p, &un, sizeof p) == 0);
        }
    /* a preset followed by overrides; overrides alone start from the default */
    CHECK(sotto_policy_resolve(&p, SOTTO_WFMT_NF4, 384, "uniform,decoder.mlp=q8", &err) == 0);
    u.fmt[SOTTO_POLICY_DEC_MLP] = SOTTO_WFMT_Q8;
    CHECK(memcmp(&p, &u, sizeof p) == 0);
    sotto_policy d = sotto_policy_default_for(SOTTO_WFMT_NVFP4, 512);
    d.fmt[SOTTO_POLICY_EMBED] = SOTTO_WFMT_BF16;
    CHECK(sotto_policy_resolve(&p, SOTTO_WFMT_NVFP4, 512, "embed=bf16", &err) == 0 &&
          memcmp(&p, &d, sizeof p) == 0);
    CHECK(sotto_policy_resolve(&p, SOTTO_WFMT_NVFP4, 512, "default,embed=bf16", &err) == 0 &&
          memcmp(&p, &d, sizeof p) == 0);
    /* a preset anywhere but first, or a misspelt one, is refused */
    const char *bad[] = {"decoder=q8,uniform", "uniformly", "uniform,", "uniform,,decoder=q8", "defaults"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int rc = sotto_policy_resolve(&p, SOTTO_WFMT_NF4, 384, bad[i], &err);
        CHECK_MSG(rc == SOTTO_E_INVALID && err.msg[0], "'%s' accepted", bad[i]);
    }
}

static sotto_model *load(const char *dir, sotto_wfmt w, const char *policy, int dq, sotto_err *err) {
    sotto_model_params p = sotto_model_default_params();
    p.weights = w;
    p.policy = policy;
    p.nf4_double_quant = dq;
    return sotto_model_load(dir, &p, err);
}

static void test_loads(const char *dir) {
    sotto_err err;
    sotto_model *f32 = load(dir, SOTTO_WFMT_F32, NULL, 0, &err);
    CHECK_MSG(f32 != NULL, "%s", err.msg);
    if (!f32) return;
    size_t full = sotto_model_weight_bytes(f32);
    const sotto_wfmt fmts[] = {SOTTO_WFMT_BF16, SOTTO_WFMT_Q8, SOTTO_WFMT_NF4, SOTTO_WFMT_NVFP4};
    for (size_t i = 0; i < 4; i++) {
        sotto_model *m = load(dir, fmts[i], "uniform", 0, &err);
        CHECK_MSG(m != NULL, "%s: %s", sotto_wfmt_name(fmts[i]), err.msg);
        if (!m) continue;
        /* uniform: every linear layer holds the format asked for */
        int ok = 1;
        for (int l = 0; l < m->hp.n_audio_layer; l++)
            ok &= m->enc[l].q.w.fmt == fmts[i] && m->enc[l].fc2.w.fmt == fmts[i];
        for (int l = 0; l < m->hp.n_text_layer; l++)
            ok &= m->dec[l].ck.w.fmt == fmts[i] && m->dec[l].fc1.w.fmt == fmts[i];
        CHECK_MSG(ok, "%s: a layer holds another format", sotto_wfmt_name(fmts[i]));
        sotto_wfmt emb = fmts[i] == SOTTO_WFMT_BF16 ? SOTTO_WFMT_BF16 : SOTTO_WFMT_Q8;
        CHECK(m->emb.fmt == emb);
        size_t b = sotto_model_weight_bytes(m);
        double ratio = (double)b / (double)full;
        CHECK_MSG(ratio < (fmts[i] == SOTTO_WFMT_BF16 ? 0.55 : fmts[i] == SOTTO_WFMT_Q8 ? 0.33 : 0.26),
                  "%s holds %.0f%% of the f32 bytes", sotto_wfmt_name(fmts[i]), 100 * ratio);
        CHECK(sotto_model_part_bytes(m, 0) + sotto_model_part_bytes(m, 1) +
                  sotto_model_part_bytes(m, 2) == b);
        CHECK(sotto_model_load_peak_rss(m) > 0 && sotto_model_largest_tensor(m) > 0);
        sotto_model_free(m);
    }
    /* the default preset of each 4-bit format, for tiny's width, part by part */
    for (int f = 0; f < 2; f++) {
        sotto_wfmt fmt = f ? SOTTO_WFMT_NVFP4 : SOTTO_WFMT_NF4;
        sotto_model *m = load(dir, fmt, NULL, 0, &err);
        CHECK_MSG(m != NULL, "%s: %s", sotto_wfmt_name(fmt), err.msg);
        if (!m) continue;
        sotto_policy want = sotto_policy_default_for(fmt, m->hp.n_audio_state);
        CHECK(sotto_policy_equal(&m->policy, &want));
        int ok = m->emb.fmt == SOTTO_WFMT_Q8;
        for (int l = 0; l < m->hp.n_audio_layer; l++)
            ok &= m->enc[l].q.w.fmt == sotto_policy_fmt(&want, SOTTO_POLICY_ENC_ATTN, l) &&
                  m->enc[l].fc1.w.fmt == sotto_policy_fmt(&want, SOTTO_POLICY_ENC_MLP, l);
        for (int l = 0; l < m->hp.n_text_layer; l++)
            ok &= m->dec[l].v.w.fmt == sotto_policy_fmt(&want, SOTTO_POLICY_DEC_ATTN, l) &&
                  m->dec[l].cv.w.fmt == sotto_policy_fmt(&want, SOTTO_POLICY_DEC_CROSS, l) &&
                  m->dec[l].fc2.w.fmt == sotto_policy_fmt(&want, SOTTO_POLICY_DEC_MLP, l);
        CHECK_MSG(ok, "%s default: a layer holds another format than the preset's",
                  sotto_wfmt_name(fmt));
        sotto_model_free(m);
    }
    /* per-layer formats reach the layers they name, and only those */
    {
        sotto_model *m = load(dir, SOTTO_WFMT_NF4, "uniform,decoder.1.cross=q8,encoder.3=bf16", 0,
                              &err);
        CHECK_MSG(m != NULL, "%s", err.msg);
        if (m) {
            CHECK(m->dec[1].ck.w.fmt == SOTTO_WFMT_Q8 && m->dec[1].co.w.fmt == SOTTO_WFMT_Q8 &&
                  m->dec[0].ck.w.fmt == SOTTO_WFMT_NF4 && m->dec[1].k.w.fmt == SOTTO_WFMT_NF4);
            CHECK(m->enc[3].q.w.fmt == SOTTO_WFMT_BF16 && m->enc[3].fc2.w.fmt == SOTTO_WFMT_BF16 &&
                  m->enc[2].q.w.fmt == SOTTO_WFMT_NF4);
            char buf[512];
            sotto_model_policy_string(m, buf, sizeof buf);
            CHECK_MSG(strstr(buf, "decoder.1.cross=q8") && strstr(buf, "encoder.3.attn=bf16"),
                      "%s", buf);
            sotto_model_free(m);
        }
        /* tiny.en has 4 decoder layers: naming a fifth is refused, with the count */
        m = load(dir, SOTTO_WFMT_NF4, "decoder.4.mlp=q8", 0, &err);
        CHECK_MSG(m == NULL && err.code == SOTTO_E_INVALID && strstr(err.msg, "decoder layer 4") &&
                      strstr(err.msg, "4 layers"),
                  "%s", m ? "loaded" : err.msg);
        sotto_model_free(m);
    }
    /* mixed policy + double quantization */
    sotto_model *m = load(dir, SOTTO_WFMT_NF4, "decoder=q8,embed=bf16", 1, &err);
    CHECK_MSG(m != NULL, "%s", err.msg);
    if (m) {
        CHECK(m->enc[0].fc1.w.fmt == SOTTO_WFMT_NF4 && m->enc[0].fc1.w.nf4_dq != NULL);
        CHECK(m->dec[0].fc1.w.fmt == SOTTO_WFMT_Q8 && m->emb.fmt == SOTTO_WFMT_BF16);
        sotto_model_free(m);
    }
    /* a bad policy fails the load with its message */
    m = load(dir, SOTTO_WFMT_F32, "encoder=int2", 0, &err);
    CHECK(m == NULL && err.code == SOTTO_E_INVALID && strstr(err.msg, "int2"));
    sotto_model_free(f32);
}

int main(void) {
    test_defaults_and_overrides();
    test_layers();
    test_parts();
    test_presets();
    const char *src = getenv("SOTTO_SOURCE_DIR");
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/models/tiny.en", src ? src : ".");
    test_loads(dir);
    return check_report();
}
