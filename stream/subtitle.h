/* subtitle.h - SubRip (.srt) and WebVTT (.vtt) text from timed cues, and
 * word timings interpolated within a cue.
 *
 * Ownership: the returned text is malloc'd and belongs to the caller; cues
 * are only read.
 */
#ifndef SOTTO_SUBTITLE_H
#define SOTTO_SUBTITLE_H

#include <stddef.h>

typedef struct sotto_cue {
    double start, end; /* seconds */
    const char *text;  /* UTF-8; surrounding whitespace is trimmed */
} sotto_cue;

/* The whole .srt (vtt = 0) or .vtt (vtt = 1) file; NULL when out of memory. */
char *sotto_subtitles(const sotto_cue *cues, int n, int vtt, size_t *len);

/* "hh:mm:ss,mmm" (srt) or "hh:mm:ss.mmm" (vtt); buf holds at least 16 bytes. */
void sotto_subtitle_time(char *buf, size_t bufsz, double t, int vtt);

/* A word of a cue: bytes [off, off + len) of its text, and times spread over
 * the cue in proportion to the words' lengths (an estimate, not an alignment). */
typedef struct sotto_word_span {
    size_t off, len;
    double start, end;
} sotto_word_span;

/* Splits text at whitespace into at most max words; returns the count. */
int sotto_cue_words(const char *text, double start, double end, sotto_word_span *out, int max);

#endif
