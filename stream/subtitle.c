/* subtitle.c - see subtitle.h. */
#include "subtitle.h"

#include "strbuf.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void sotto_subtitle_time(char *buf, size_t bufsz, double t, int vtt) {
    if (!(t > 0)) t = 0;
    long ms = (long)(t * 1000 + 0.5);
    snprintf(buf, bufsz, "%02ld:%02ld:%02ld%c%03ld", ms / 3600000, ms / 60000 % 60, ms / 1000 % 60,
             vtt ? '.' : ',', ms % 1000);
}

char *sotto_subtitles(const sotto_cue *cues, int n, int vtt, size_t *len) {
    sotto_sb b = {0};
    if (vtt) sotto_sb_printf(&b, "WEBVTT\n\n");
    for (int i = 0; i < n; i++) {
        const char *t = cues[i].text ? cues[i].text : "";
        while (isspace((unsigned char)*t)) t++;
        size_t tl = strlen(t);
        while (tl && isspace((unsigned char)t[tl - 1])) tl--;
        char a[32], z[32];
        sotto_subtitle_time(a, sizeof a, cues[i].start, vtt);
        sotto_subtitle_time(z, sizeof z, cues[i].end, vtt);
        if (!vtt) sotto_sb_printf(&b, "%d\n", i + 1);
        sotto_sb_printf(&b, "%s --> %s\n%.*s\n\n", a, z, (int)tl, t);
    }
    return sotto_sb_take(&b, len);
}

int sotto_cue_words(const char *text, double start, double end, sotto_word_span *out, int max) {
    int n = 0;
    size_t total = 0;
    for (size_t i = 0; text[i] && n < max;) {
        while (text[i] && isspace((unsigned char)text[i])) i++;
        if (!text[i]) break;
        size_t j = i;
        while (text[j] && !isspace((unsigned char)text[j])) j++;
        out[n].off = i;
        out[n].len = j - i;
        total += j - i;
        n++;
        i = j;
    }
    if (end < start) end = start;
    double t = start, per = total ? (end - start) / (double)total : 0;
    for (int k = 0; k < n; k++) {
        out[k].start = t;
        t += per * (double)out[k].len;
        out[k].end = k == n - 1 ? end : t;
    }
    return n;
}

/* ---- subtitle-sized cues ---------------------------------------------------------- */

size_t sotto_utf8_chars(const char *s, size_t len) {
    size_t n = 0;
    for (size_t i = 0; i < len; i++) n += ((unsigned char)s[i] & 0xC0) != 0x80;
    return n;
}

typedef struct word {
    const char *p;
    size_t len, chars;
    double start, end;
} word;

/* Lines that words [a, b) take when wrapped greedily at width (the fewest
 * possible); a word wider than width takes a line of its own. */
static int lines_needed(const word *w, int a, int b, int width) {
    int lines = 0;
    size_t cur = 0;
    for (int i = a; i < b; i++) {
        if (lines == 0 || cur + 1 + w[i].chars > (size_t)width) {
            lines++;
            cur = w[i].chars;
        } else {
            cur += 1 + w[i].chars;
        }
    }
    return lines;
}

static int ends_sentence(const word *w) {
    char c = w->p[w->len - 1];
    if ((c == '"' || c == '\'' || c == ')') && w->len > 1) c = w->p[w->len - 2];
    return c == '.' || c == '?' || c == '!';
}

/* The text of words [a, b) as lines: two balanced lines where two are
 * needed, else greedy wrapping. */
static char *cue_text(const word *w, int a, int b, int width) {
    size_t bytes = 0;
    for (int i = a; i < b; i++) bytes += w[i].len + 1;
    char *t = malloc(bytes + 1);
    if (!t) return NULL;
    int lines = lines_needed(w, a, b, width);
    int split = -1; /* the first word of the second line, for two lines */
    if (lines == 2) {
        size_t total = 0, left = 0, best = (size_t)-1;
        for (int i = a; i < b; i++) total += w[i].chars + (i > a);
        for (int k = a + 1; k < b; k++) {
            left += w[k - 1].chars + (k - 1 > a);
            size_t right = total - left - 1, worst = left > right ? left : right;
            if (left <= (size_t)width && right <= (size_t)width && worst < best) {
                best = worst;
                split = k;
            }
        }
    }
    size_t o = 0, cur = 0;
    for (int i = a; i < b; i++) {
        if (i > a) {
            int brk = split >= 0 ? i == split : cur + 1 + w[i].chars > (size_t)width;
            t[o++] = brk ? '\n' : ' ';
            cur = brk ? 0 : cur + 1;
        }
        memcpy(t + o, w[i].p, w[i].len);
        o += w[i].len;
        cur += w[i].chars;
    }
    t[o] = '\0';
    return t;
}

int sotto_split_cues(const sotto_cue *in, int n, const sotto_cue_limits *lim, sotto_cue **out) {
    sotto_cue_limits L = lim ? *lim : SOTTO_CUE_LIMITS_DEFAULT;
    if (L.line_chars < 1) L.line_chars = 1;
    if (L.max_lines < 1) L.max_lines = 1;
    *out = NULL;
    size_t cap = 0;
    for (int i = 0; i < n; i++) cap += in[i].text ? strlen(in[i].text) / 2 + 1 : 0;
    word *w = malloc(sizeof *w * (cap ? cap : 1));
    sotto_word_span *spans = malloc(sizeof *spans * (cap ? cap : 1));
    int nw = 0;
    if (!w || !spans) goto oom;
    for (int i = 0; i < n; i++) {
        if (!in[i].text) continue;
        int k = sotto_cue_words(in[i].text, in[i].start, in[i].end, spans, (int)(cap - (size_t)nw));
        for (int j = 0; j < k; j++, nw++) {
            const char *p = in[i].text + spans[j].off;
            w[nw] = (word){p, spans[j].len, sotto_utf8_chars(p, spans[j].len), spans[j].start, spans[j].end};
        }
    }
    free(spans);
    spans = NULL;
    sotto_cue *c = malloc(sizeof *c * (size_t)(nw ? nw : 1));
    if (!c) goto oom;
    int nc = 0;
    for (int a = 0; a < nw;) {
        int b = a + 1;
        size_t chars = w[a].chars;
        for (; b < nw; b++) {
            if (w[b].start - w[b - 1].end >= L.gap_s) break;
            if (w[b].end - w[a].start > L.max_s) break;
            if (ends_sentence(&w[b - 1]) && chars >= (size_t)L.line_chars) break;
            if (lines_needed(w, a, b + 1, L.line_chars) > L.max_lines) break;
            chars += 1 + w[b].chars;
        }
        char *t = cue_text(w, a, b, L.line_chars);
        if (!t) {
            sotto_cues_free(c, nc);
            goto oom;
        }
        c[nc++] = (sotto_cue){w[a].start, w[b - 1].end, t};
        a = b;
    }
    free(w);
    *out = c;
    return nc;
oom:
    free(w);
    free(spans);
    return -1;
}

void sotto_cues_free(sotto_cue *cues, int n) {
    for (int i = 0; i < n; i++) free((char *)cues[i].text);
    free(cues);
}
