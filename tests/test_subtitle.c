/* test_subtitle.c - stream/subtitle.c: times, .srt/.vtt text, and the cue
 * splitter that turns whole utterances (one final each, up to 28 s) into
 * subtitle cues of at most 2 lines of 42 characters and about 7 s, cut at
 * word boundaries and never across a pause. */
#include "check.h"
#include "subtitle.h"

#include <stdlib.h>
#include <string.h>

/* Every cue within the limits: lines, characters per line (a line may be
 * longer only if it is one word), duration, order. */
static void check_cues(const sotto_cue *c, int n, const sotto_cue_limits *L, const char *what) {
    for (int i = 0; i < n; i++) {
        int lines = 1;
        const char *t = c[i].text, *line = t;
        CHECK_MSG(t[0] != '\0' && t[0] != ' ' && t[strlen(t) - 1] != ' ', "%s: cue %d text '%s'", what, i, t);
        for (const char *p = t;; p++) {
            if (*p == '\n' || *p == '\0') {
                size_t chars = sotto_utf8_chars(line, (size_t)(p - line));
                int one_word = memchr(line, ' ', (size_t)(p - line)) == NULL;
                CHECK_MSG(chars <= (size_t)L->line_chars || one_word, "%s: cue %d line of %zu chars: '%.*s'",
                          what, i, chars, (int)(p - line), line);
                if (!*p) break;
                lines++;
                line = p + 1;
            }
        }
        CHECK_MSG(lines <= L->max_lines, "%s: cue %d has %d lines", what, i, lines);
        CHECK_MSG(c[i].end - c[i].start <= L->max_s + 1e-9, "%s: cue %d lasts %.2f s", what, i,
                  c[i].end - c[i].start);
        CHECK_MSG(c[i].end >= c[i].start, "%s: cue %d ends before it starts", what, i);
        if (i) CHECK_MSG(c[i].start >= c[i - 1].end - 1e-9, "%s: cue %d overlaps cue %d", what, i, i - 1);
    }
}

/* The words of the cues, joined by single spaces. */
static char *joined(const sotto_cue *c, int n) {
    size_t len = 1;
    for (int i = 0; i < n; i++) len += strlen(c[i].text) + 1;
    char *s = malloc(len), *o = s;
    for (int i = 0; i < n; i++) {
        if (i) *o++ = ' ';
        for (const char *p = c[i].text; *p; p++) *o++ = *p == '\n' ? ' ' : *p;
    }
    *o = '\0';
    return s;
}

int main(void) {
    char buf[32];
    sotto_subtitle_time(buf, sizeof buf, 3723.4567, 0);
    CHECK(!strcmp(buf, "01:02:03,457"));
    sotto_subtitle_time(buf, sizeof buf, -1, 1);
    CHECK(!strcmp(buf, "00:00:00.000"));

    sotto_cue_limits L = SOTTO_CUE_LIMITS_DEFAULT;

    /* a 17 s utterance of 45 words (what the feed .srt had as one cue) */
    const char *long_utt =
        "So the first thing that we want to do when we get to the station is find the platform, "
        "and then we buy the tickets for everybody, and after that we can finally sit down and wait "
        "for the train to London.";
    /* a short utterance after a 3 s pause, then after 1.4 s one with a word wider than a line */
    const char *short_utt = "Yes.";
    const char *wide =
        "It said Pneumonoultramicroscopicsilicovolcanoconiosis-and-then-some right there.";
    sotto_cue in[] = {{1.0, 18.0, long_utt}, {21.0, 21.6, short_utt}, {23.0, 27.0, wide}};
    sotto_cue *out = NULL;
    int n = sotto_split_cues(in, 3, &L, &out);
    CHECK_MSG(n >= 5, "%d cues", n);
    check_cues(out, n, &L, "long");
    char *all = joined(out, n);
    char want[1024];
    snprintf(want, sizeof want, "%s %s %s", long_utt, short_utt, wide);
    CHECK_MSG(!strcmp(all, want), "the words changed: '%s'", all);
    free(all);
    /* the pause: no cue spans 18..21 s; "Yes." is a cue of its own */
    int yes = -1;
    for (int i = 0; i < n; i++) {
        CHECK_MSG(!(out[i].start < 18.0 && out[i].end > 21.0 - 1e-9), "cue %d spans the pause", i);
        if (!strcmp(out[i].text, "Yes.")) yes = i;
    }
    CHECK_MSG(yes >= 0 && out[yes].start >= 21.0 - 1e-9 && out[yes].end <= 21.6 + 1e-9, "Yes. cue %d", yes);
    CHECK(out[0].start == 1.0);
    /* two lines are balanced: neither is more than a word longer than the other */
    for (int i = 0; i < n; i++) {
        const char *nl = strchr(out[i].text, '\n');
        if (!nl || strchr(nl + 1, ' ') == NULL) continue;
        size_t a = (size_t)(nl - out[i].text), b = strlen(nl + 1);
        CHECK_MSG(a < b + 15 && b < a + 15, "unbalanced cue %d: '%s'", i, out[i].text);
    }

    /* the .srt of the split cues: numbered, with both lines */
    size_t len = 0;
    char *srt = sotto_subtitles(out, n, 0, &len);
    CHECK(srt && !strncmp(srt, "1\n00:00:01,000 --> ", 19) && strlen(srt) == len);
    CHECK(srt && strstr(srt, "\nYes.\n"));
    free(srt);
    sotto_cues_free(out, n);

    /* tighter limits: one line of 10, 2 s */
    sotto_cue_limits T = {10, 1, 2.0, 0.5};
    n = sotto_split_cues(in, 1, &T, &out);
    CHECK(n > 10);
    check_cues(out, n, &T, "tight");
    sotto_cues_free(out, n);

    /* UTF-8: characters, not bytes, count; 42 two-byte letters fit a line */
    char wide_utf8[256] = "";
    for (int i = 0; i < 6; i++) strcat(wide_utf8, "\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9 ");
    strcat(wide_utf8, "\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9");
    CHECK_EQ_INT(sotto_utf8_chars(wide_utf8, strlen(wide_utf8)), 6 * 7 + 5);
    sotto_cue u = {0, 3, wide_utf8};
    n = sotto_split_cues(&u, 1, &L, &out);
    CHECK_EQ_INT(n, 1);
    check_cues(out, n, &L, "utf8");
    CHECK(n == 1 && strchr(out[0].text, '\n') != NULL); /* 47 characters: two lines */
    sotto_cues_free(out, n);

    /* nothing to say, blank and NULL texts */
    sotto_cue empty[] = {{0, 1, ""}, {1, 2, "   "}, {2, 3, NULL}};
    n = sotto_split_cues(empty, 3, NULL, &out);
    CHECK_EQ_INT(n, 0);
    sotto_cues_free(out, n);
    n = sotto_split_cues(NULL, 0, NULL, &out);
    CHECK_EQ_INT(n, 0);
    sotto_cues_free(out, n);
    return check_report();
}
