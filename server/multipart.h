/* multipart.h - multipart/form-data (RFC 7578) parsing for the upload
 * endpoints: a pure function over a complete body in memory, so that it can
 * be tested and fuzzed without a socket (fuzz/fuzz_multipart.c).
 *
 * Parts are delimited by CRLF "--boundary"; a preamble before the first
 * delimiter and an epilogue after the closing "--boundary--" are ignored.
 * Every part needs a Content-Disposition: form-data header with a name;
 * filename is kept when given. Part data is not copied: it points into the
 * body. Limits: SRV_FORM_MAX_PARTS parts, names below SRV_FORM_NAME_MAX
 * bytes, header lines below SRV_FORM_LINE_MAX bytes; anything beyond is an
 * error with a message, never a truncation.
 */
#ifndef SOTTO_MULTIPART_H
#define SOTTO_MULTIPART_H

#include <stddef.h>

#define SRV_FORM_MAX_PARTS 32
#define SRV_FORM_NAME_MAX 128
#define SRV_FORM_LINE_MAX 1024
#define SRV_FORM_BOUNDARY_MAX 70 /* RFC 2046 */

typedef struct srv_form_part {
    char name[SRV_FORM_NAME_MAX];
    char filename[SRV_FORM_NAME_MAX]; /* "" when not given (or too long: has_filename still 1) */
    int has_filename;
    const unsigned char *data; /* into the body */
    size_t len;
} srv_form_part;

typedef struct srv_form {
    srv_form_part parts[SRV_FORM_MAX_PARTS];
    int n;
} srv_form;

/* The boundary parameter of a Content-Type value ("multipart/form-data;
 * boundary=..."; quoted or not) into out (SRV_FORM_BOUNDARY_MAX + 1 bytes);
 * 0, or -1 with why. */
int srv_multipart_boundary(const char *content_type, char *out, char *why, size_t why_sz);

/* Splits body into parts; 0, or -1 with why (the form is then unusable). */
int srv_multipart_parse(const unsigned char *body, size_t len, const char *boundary, srv_form *f,
                        char *why, size_t why_sz);

/* The index-th part (0-based) named name, or NULL. */
const srv_form_part *srv_form_get(const srv_form *f, const char *name, int index);

#endif
