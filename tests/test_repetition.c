#define _DEFAULT_SOURCE
/* test_repetition.c - the decoding-loop detector (include/repetition.h):
 * synthetic patterns at the edges of its rules, real loops Whisper wrote
 * (tokenized with tiny.en's tokenizer), and every reference transcript of
 * the dev set, on which it must never fire. */
#include "check.h"
#include "tiny_tokenizer.h"
#include "decoding.h"
#include "repetition.h"
#include "whisper.h"
#include "tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EOT 50256 /* tiny.en: <|endoftext|>; timestamps come after it */

static int rep(const int32_t *t, int n, sotto_repetition *r) {
    return sotto_repetition_find(t, n, EOT, r);
}

/* n copies of pattern p[0..k) into out, after `lead` distinct tokens */
static int copies(int32_t *out, int lead, const int32_t *p, int k, int n) {
    int m = 0;
    for (int i = 0; i < lead; i++) out[m++] = 1000 + i;
    for (int c = 0; c < n; c++)
        for (int i = 0; i < k; i++) out[m++] = p[i];
    return m;
}

static int encode(const sotto_tokenizer *tok, const char *s, int32_t *ids, int cap) {
    size_t n = 0;
    sotto_err err;
    int rc = sotto_tokenizer_encode(tok, s, strlen(s), ids, (size_t)cap, &n, &err);
    CHECK_MSG(rc == SOTTO_OK, "encode failed: %s", err.msg);
    return rc == SOTTO_OK ? (int)n : 0;
}

int main(void) {
    int32_t t[4096];
    sotto_repetition r;

    /* ---- the consecutive rule at its edges ------------------------------ */
    const int32_t p7[] = {40, 716, 407, 1654, 611, 314, 460}; /* 7 tokens */
    int n = copies(t, 5, p7, 7, 2);
    CHECK(!rep(t, n, &r)); /* said twice: fine */
    n = copies(t, 5, p7, 7, 3);
    CHECK(rep(t, n, &r));
    CHECK_EQ_INT(r.at, 5 + 7); /* keep the lead and the first copy */
    CHECK_EQ_INT(r.period, 7);
    CHECK(sotto_repetition_tail(t, n, EOT));
    const int32_t p3[] = {11, 12, 13};
    n = copies(t, 0, p3, 3, 3); /* "I think, I think, I think": 3 x 3 tokens */
    CHECK(rep(t, n, &r) && r.at == 3 && r.period == 3);
    const int32_t p2[] = {21, 22};
    n = copies(t, 2, p2, 2, 4); /* "very, very, very, very": 2 x 4 */
    CHECK(!rep(t, n, &r) && !sotto_repetition_tail(t, n, EOT));
    n = copies(t, 2, p2, 2, 5);
    CHECK(rep(t, n, &r) && r.at == 4);
    const int32_t p1[] = {31};
    n = copies(t, 0, p1, 1, 8);
    CHECK(!rep(t, n, &r));
    n = copies(t, 0, p1, 1, 9);
    CHECK(rep(t, n, &r) && r.at == 1);
    /* a loop that the text then leaves: found, but not at the tail */
    n = copies(t, 3, p7, 7, 4);
    for (int i = 0; i < 20; i++) t[n++] = 2000 + i;
    CHECK(rep(t, n, &r) && r.at == 10);
    CHECK(!sotto_repetition_tail(t, n, EOT));

    /* ---- timestamps between copies do not hide a loop -------------------- */
    {
        int m = 0, where[4] = {0};
        for (int c = 0; c < 4; c++) {
            t[m++] = EOT + 100 + 2 * c; /* <|t|> */
            where[c] = m;
            for (int i = 0; i < 7; i++) t[m++] = p7[i];
            t[m++] = EOT + 101 + 2 * c;
        }
        CHECK(rep(t, m, &r));
        CHECK_EQ_INT(r.at, where[1]); /* index into the original tokens */
    }

    /* ---- the scattered rule ----------------------------------------------- */
    {
        int m = 0;
        for (int c = 0; c < 3; c++) {
            for (int i = 0; i < 8; i++) t[m++] = 500 + i;
            for (int i = 0; i < 3 + c; i++) t[m++] = 600 + 10 * c + i; /* drift between copies */
        }
        CHECK(rep(t, m, &r));
        CHECK_EQ_INT(r.at, 11); /* the second copy */
        m = 0;
        for (int c = 0; c < 2; c++) {
            for (int i = 0; i < 8; i++) t[m++] = 500 + i;
            for (int i = 0; i < 4; i++) t[m++] = 700 + 10 * c + i;
        }
        CHECK(!rep(t, m, &r)); /* twice is not a loop */
    }
    CHECK(!rep(t, 0, &r) && !sotto_repetition_tail(t, 0, EOT));

    sotto_tokenizer *tok = load_tok();
    if (!tok) return check_report();

    /* ---- loops Whisper wrote (the cases) --------------------------- */
    const char *loops[] = {
        " I am not sure if I can. I am not sure if I can. I am not sure if I can.",
        " He knew that Browny would want to know what prevented the accident, but he was in "
        "no-fucking-fucking-fucking-fucking",
        " Thank you. Thank you. Thank you. Thank you. Thank you.",
        " I am not sure if I can tell you. It is a lot of work. I am not sure if I can tell you "
        "that. It is a lot. I am not sure if I can tell you.",
    };
    for (size_t i = 0; i < sizeof loops / sizeof loops[0]; i++) {
        int m = encode(tok, loops[i], t, 4096);
        CHECK_MSG(rep(t, m, &r), "not found: %s", loops[i]);
    }
    /* the cut keeps the text before the loop and one copy */
    {
        int m = encode(tok, loops[0], t, 4096);
        CHECK(rep(t, m, &r));
        char *kept = sotto_tokenizer_decode(tok, t, (size_t)r.at, NULL);
        CHECK_MSG(kept && strcmp(kept, " I am not sure if I can.") == 0, "kept '%s'", kept ? kept : "");
        free(kept);
    }

    /* ---- the word rule: copies whose tokens differ ------------------------ */
    {
        const char *seen = " And Mr. John Dashwood had that feature to consider how much they were "
                           "thinking of. How much they were thinking of. How much they were think";
        int m = encode(tok, seen, t, 4096);
        CHECK_MSG(!rep(t, m, &r), "the token rule now catches it (at %d): the word rule's case "
                                  "needs another example", r.at);
        int second = -1;
        CHECK(sotto_repetition_find_words(seen, &second));
        CHECK_EQ_INT(second, 15); /* "How", the second copy */
        CHECK_EQ_INT(sotto_repetition_count_words(seen), 26);
        for (size_t i = 0; i < sizeof loops / sizeof loops[0]; i++)
            if (i != 1) /* one word 4 times: the token rule's (above), not 3 copies of 4 words */
                CHECK_MSG(sotto_repetition_find_words(loops[i], NULL), "not found: %s", loops[i]);
        CHECK(!sotto_repetition_find_words(" I think, I think, I think so.", NULL)); /* 2 words */
        /* a contraction is two words, as the normalizer makes "I'm" "i am": a
           hallucination of pink noise at 5 dB (bench_rooms, 2026-12-07) */
        {
            const char *im = " I know you're tired. I don't know if I'm going to touch you. I'm going "
                             "to do this. I'm going to do a face by hand.";
            int st[3] = {-1, -1, -1};
            CHECK(sotto_repetition_find_word_copies(im, st));
            /* I know you 're tired I don 't know if I(10) 'm going to touch you I(16) 'm
               going to do this I(22) */
            CHECK_MSG(st[0] == 10 && st[1] == 16 && st[2] == 22, "copies at %d %d %d", st[0], st[1],
                      st[2]);
            CHECK_EQ_INT(sotto_repetition_count_words(" I'm here, don't go."), 6);
            CHECK_EQ_INT(sotto_repetition_count_words(" 'Tis rock 'n' roll, o'clock."), 6);
            /* "i am fine" three times holds a 4-word phrase twice, not three times */
            CHECK(!sotto_repetition_find_words(" I'm fine, I'm fine, I'm fine.", NULL));
        }
        CHECK(!sotto_repetition_find_words(" Very, very, very good.", NULL));
        CHECK(!sotto_repetition_find_words(
            " the end of the day was near. We walked and walked along the shore for a long while "
            "until the end of the day came, and then we rested, talked, ate and slept, all of us, "
            "quietly, through the night until the end of the day after.", NULL)); /* far apart */
        CHECK(!sotto_repetition_find_words("", NULL) && !sotto_repetition_find_words(NULL, NULL));

        /* through the guardrails, with the real model: flagged, cut before the second copy */
        const char *src = getenv("SOTTO_SOURCE_DIR");
        char dir[4096];
        snprintf(dir, sizeof dir, "%s/models/tiny.en", src && *src ? src : ".");
        sotto_model_params mp = sotto_model_default_params();
        sotto_err err;
        sotto_model *model = sotto_model_load(dir, &mp, &err);
        CHECK_MSG(model != NULL, "cannot load %s: %s", dir, err.msg);
        if (model) {
            sotto_guard_opts go = sotto_guard_default_opts();
            sotto_generate_result res;
            memset(&res, 0, sizeof res);
            res.tokens = t;
            res.n_tokens = m;
            res.avg_logprob = -0.2f;
            sotto_verdict v;
            CHECK(sotto_guard_check(model, &go, &res, 10.0, 0, &v, &err) == SOTTO_OK);
            CHECK_MSG(v.failed & SOTTO_GUARD_REPETITION, "failed 0x%x", (unsigned)v.failed);
            CHECK(v.rep.at > 0 && v.rep.at < m);
            char *kept = v.rep.at > 0 ? sotto_tokenizer_decode(tok, t, (size_t)v.rep.at, NULL) : NULL;
            CHECK_MSG(kept && strcmp(kept, " And Mr. John Dashwood had that feature to consider how "
                                             "much they were thinking of.") == 0,
                      "kept '%s'", kept ? kept : "");
            free(kept);
            /* the text before the loop alone passes */
            res.n_tokens = v.rep.at;
            CHECK(sotto_guard_check(model, &go, &res, 10.0, 0, &v, &err) == SOTTO_OK);
            CHECK_MSG(!(v.failed & SOTTO_GUARD_REPETITION), "failed 0x%x", (unsigned)v.failed);
            sotto_model_free(model);
        }
    }

    /* ---- never on real speech: every reference transcript of the dev set --- */
    const char *man = getenv("SOTTO_MANIFEST");
    char path[1024];
    if (!man || !*man) {
        const char *src = getenv("SOTTO_SOURCE_DIR");
        snprintf(path, sizeof path, "%s/../shared/audio/manifest.tsv", src && *src ? src : ".");
        man = path;
    }
    FILE *f = fopen(man, "r");
    CHECK_MSG(f != NULL, "cannot open the dev manifest %s", man);
    if (f) {
        static char line[1 << 16];
        int texts = 0, en = 0;
        while (fgets(line, sizeof line, f)) {
            if (texts++ == 0) continue; /* header */
            /* id file seconds language source license text */
            char *col[7] = {0};
            int k = 0;
            for (char *p = line, *s; k < 7 && (s = strsep(&p, "\t")); k++) col[k] = s;
            if (k < 7 || strcmp(col[3], "en") != 0) continue;
            col[6][strcspn(col[6], "\r\n")] = 0;
            char text[1 << 16];
            snprintf(text, sizeof text, " %s", col[6]);
            /* Whisper writes sentence case: lower-case the LibriSpeech capitals */
            for (char *p = text + 1; *p; p++)
                if (*p >= 'A' && *p <= 'Z' && p[-1] != ' ') *p = (char)(*p - 'A' + 'a');
            int m = encode(tok, text, t, 4096);
            en++;
            CHECK_MSG(!rep(t, m, &r), "fired on the reference of %s at token %d (period %d)",
                      col[0], r.at, r.period);
            int wsec = -1;
            CHECK_MSG(!sotto_repetition_find_words(text, &wsec),
                      "the word rule fired on the reference of %s at word %d", col[0], wsec);
        }
        fclose(f);
        CHECK_MSG(en >= 40, "only %d English references in %s", en, man);
    }
    sotto_tokenizer_free(tok);
    return check_report();
}
