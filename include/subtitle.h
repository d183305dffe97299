/* subtitle.h - SubRip (.srt) and WebVTT (.vtt) text from timed cues, word
 * timings interpolated within a cue, and the splitting of long stretches of
 * speech into subtitle-sized cues.
 *
 * Ownership: the returned text is malloc'd and belongs to the caller; cues
 * are only read, except those sotto_split_cues() makes (sotto_cues_free).
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

/* What a subtitle cue may hold (the broadcast norms: 2 lines of 42
 * characters, about 7 s on screen). */
typedef struct sotto_cue_limits {
    int line_chars;  /* characters (UTF-8 code points) per line: 42 */
    int max_lines;   /* lines per cue: 2 */
    double max_s;    /* longest cue: 7 s */
    double gap_s;    /* a silence at least this long between words ends a cue: 1 s */
} sotto_cue_limits;

#define SOTTO_CUE_LIMITS_DEFAULT ((sotto_cue_limits){42, 2, 7.0, 1.0})

/* Re-cuts timed stretches of speech (utterances: one cue each, however long)
 * into subtitle cues: the words of all of them, with times interpolated by
 * sotto_cue_words(), are grouped in order into cues of at most max_lines
 * lines of line_chars (broken at word boundaries, the lines balanced; a
 * single longer word gets a line of its own) lasting at most max_s (a cue
 * holds at least one word); a cue never spans a gap of gap_s or more, and
 * ends after a sentence's end once it holds a line's worth. The text of each
 * cue has its lines separated by '\n'. Returns the number of cues (*out
 * malloc'd, free with sotto_cues_free), or -1 when out of memory. */
int sotto_split_cues(const sotto_cue *in, int n, const sotto_cue_limits *lim, sotto_cue **out);
void sotto_cues_free(sotto_cue *cues, int n);

/* Characters (UTF-8 code points) in bytes [0, len) of s. */
size_t sotto_utf8_chars(const char *s, size_t len);

#endif
