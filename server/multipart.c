/* multipart.c - multipart/form-data parsing (see multipart.h). */
#define _GNU_SOURCE /* memmem */
#include "multipart.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

static int fail(char *why, size_t why_sz, const char *fmt, ...) {
    if (why && why_sz) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(why, why_sz, fmt, ap);
        va_end(ap);
    }
    return -1;
}

static const char *skip_ws(const char *p, const char *end) {
    while (p < end && (*p == ' ' || *p == '\t')) p++;
    return p;
}

/* A parameter value at p (token or quoted string, backslash escapes) into
 * out; returns the end of the value, or NULL if it is malformed. *fits is
 * cleared when it did not fit out. */
static const char *param_value(const char *p, const char *end, char *out, size_t outsz, int *fits) {
    size_t n = 0;
    *fits = 1;
    if (p < end && *p == '"') {
        for (p++; p < end && *p != '"'; p++) {
            if (*p == '\\' && p + 1 < end) p++;
            if (n + 1 < outsz) out[n++] = *p;
            else *fits = 0;
        }
        if (p >= end) return NULL; /* no closing quote */
        p++;
    } else {
        for (; p < end && *p != ';' && *p != ' ' && *p != '\t'; p++) {
            if (n + 1 < outsz) out[n++] = *p;
            else *fits = 0;
        }
    }
    out[n] = 0;
    return p;
}

int srv_multipart_boundary(const char *ct, char *out, char *why, size_t why_sz) {
    static const char type[] = "multipart/form-data";
    if (!ct || strncasecmp(ct, type, sizeof type - 1) != 0)
        return fail(why, why_sz, "the body must be multipart/form-data with a 'file' part");
    const char *p = ct + sizeof type - 1, *end = ct + strlen(ct);
    while (p < end) {
        p = skip_ws(p, end);
        if (p < end && *p == ';') p = skip_ws(p + 1, end);
        const char *eq = memchr(p, '=', (size_t)(end - p));
        if (!eq) break;
        int is_b = (size_t)(eq - p) == 8 && strncasecmp(p, "boundary", 8) == 0;
        char val[SRV_FORM_BOUNDARY_MAX + 1];
        int fits = 1;
        p = param_value(eq + 1, end, val, sizeof val, &fits);
        if (!p) return fail(why, why_sz, "malformed Content-Type parameters");
        if (is_b) {
            if (!fits || !val[0])
                return fail(why, why_sz, "the multipart boundary must have 1 to %d characters",
                            SRV_FORM_BOUNDARY_MAX);
            memcpy(out, val, strlen(val) + 1);
            return 0;
        }
        const char *semi = memchr(p, ';', (size_t)(end - p));
        if (!semi) break;
        p = semi;
    }
    return fail(why, why_sz, "the multipart/form-data Content-Type has no boundary");
}

/* Content-Disposition: form-data; name="..."; filename="..." */
static int parse_disposition(const char *v, const char *end, srv_form_part *part, char *why,
                             size_t why_sz) {
    v = skip_ws(v, end);
    if ((size_t)(end - v) < 9 || strncasecmp(v, "form-data", 9) != 0)
        return fail(why, why_sz, "a form part's Content-Disposition is not form-data");
    const char *p = v + 9;
    while (p < end) {
        p = skip_ws(p, end);
        if (p >= end) break;
        if (*p != ';') return fail(why, why_sz, "malformed Content-Disposition header");
        p = skip_ws(p + 1, end);
        const char *eq = memchr(p, '=', (size_t)(end - p));
        if (!eq) return fail(why, why_sz, "malformed Content-Disposition header");
        size_t kl = (size_t)(eq - p);
        char val[SRV_FORM_NAME_MAX];
        int fits = 1;
        const char *next = param_value(eq + 1, end, val, sizeof val, &fits);
        if (!next) return fail(why, why_sz, "malformed Content-Disposition header");
        if (kl == 4 && strncasecmp(p, "name", 4) == 0) {
            if (!fits) return fail(why, why_sz, "a form field name is longer than %d bytes", SRV_FORM_NAME_MAX - 1);
            memcpy(part->name, val, strlen(val) + 1);
        } else if (kl == 8 && strncasecmp(p, "filename", 8) == 0) {
            part->has_filename = 1;
            if (fits) memcpy(part->filename, val, strlen(val) + 1);
        }
        p = next;
    }
    if (!part->name[0]) return fail(why, why_sz, "a form part has no name");
    return 0;
}

/* The header lines of one part, from *pp up to and past the empty line. */
static int parse_headers(const unsigned char **pp, const unsigned char *end, srv_form_part *part,
                         char *why, size_t why_sz) {
    const unsigned char *p = *pp;
    int have_cd = 0;
    for (;;) {
        size_t left = (size_t)(end - p);
        const unsigned char *eol = memmem(p, left < SRV_FORM_LINE_MAX ? left : SRV_FORM_LINE_MAX, "\r\n", 2);
        if (!eol)
            return fail(why, why_sz, left < SRV_FORM_LINE_MAX ? "the form ends inside a part's headers"
                                                             : "a form part's header line is too long");
        if (eol == p) break; /* the empty line */
        const char *line = (const char *)p, *lend = (const char *)eol;
        static const char cd[] = "content-disposition:";
        if ((size_t)(lend - line) >= sizeof cd - 1 && strncasecmp(line, cd, sizeof cd - 1) == 0) {
            if (have_cd) return fail(why, why_sz, "a form part has two Content-Disposition headers");
            if (parse_disposition(line + sizeof cd - 1, lend, part, why, why_sz)) return -1;
            have_cd = 1;
        }
        p = eol + 2;
    }
    if (!have_cd) return fail(why, why_sz, "a form part has no Content-Disposition header");
    *pp = p + 2;
    return 0;
}

/* The next delimiter (CRLF "--" boundary) in [p, end) that ends a line as
 * RFC 2046 says (followed by "--", or by blanks and CRLF); NULL if none. A
 * boundary-like string that goes on ("--XyZ0") is data. */
static const unsigned char *find_delim(const unsigned char *p, const unsigned char *end,
                                       const char *delim, size_t dl) {
    while (p < end) {
        const unsigned char *d = memmem(p, (size_t)(end - p), delim, dl);
        if (!d) return NULL;
        const unsigned char *q = d + dl;
        if (end - q >= 2 && q[0] == '-' && q[1] == '-') return d;
        while (q < end && (*q == ' ' || *q == '\t')) q++;
        if (end - q >= 2 && q[0] == '\r' && q[1] == '\n') return d;
        p = d + 1;
    }
    return NULL;
}

int srv_multipart_parse(const unsigned char *body, size_t len, const char *boundary, srv_form *f,
                        char *why, size_t why_sz) {
    char delim[SRV_FORM_BOUNDARY_MAX + 5]; /* CRLF "--" boundary */
    size_t bl = boundary ? strlen(boundary) : 0;
    memset(f, 0, sizeof *f);
    if (bl == 0 || bl > SRV_FORM_BOUNDARY_MAX) return fail(why, why_sz, "bad multipart boundary");
    if (!body && len) return fail(why, why_sz, "no body");
    snprintf(delim, sizeof delim, "\r\n--%s", boundary);
    size_t dl = bl + 4;
    const unsigned char *end = body + len, *p;
    /* the first delimiter: at the very start, or after a preamble line */
    if (len >= dl - 2 && memcmp(body, delim + 2, dl - 2) == 0) {
        p = body + dl - 2;
    } else {
        const unsigned char *d = find_delim(body, end, delim, dl);
        if (!d) return fail(why, why_sz, "the body holds no multipart boundary");
        p = d + dl;
    }
    for (;;) {
        if (end - p >= 2 && p[0] == '-' && p[1] == '-') return 0; /* the closing delimiter */
        while (p < end && (*p == ' ' || *p == '\t')) p++;
        if (end - p < 2 || p[0] != '\r' || p[1] != '\n')
            return fail(why, why_sz, "the form is truncated or malformed after a boundary");
        p += 2;
        if (f->n == SRV_FORM_MAX_PARTS)
            return fail(why, why_sz, "the form has more than %d parts", SRV_FORM_MAX_PARTS);
        srv_form_part *part = &f->parts[f->n];
        if (parse_headers(&p, end, part, why, why_sz)) return -1;
        const unsigned char *d = find_delim(p, end, delim, dl);
        if (!d) return fail(why, why_sz, "the form is truncated (a part has no closing boundary)");
        part->data = p;
        part->len = (size_t)(d - p);
        f->n++;
        p = d + dl;
    }
}

const srv_form_part *srv_form_get(const srv_form *f, const char *name, int index) {
    for (int i = 0; i < f->n; i++)
        if (!strcmp(f->parts[i].name, name) && index-- == 0) return &f->parts[i];
    return NULL;
}
