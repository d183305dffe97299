/* subtitle.c - see subtitle.h. */
#include "subtitle.h"

#include "strbuf.h"

#include <ctype.h>
#include <stdio.h>
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
