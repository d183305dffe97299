/* test_multipart.c - the upload endpoints' multipart/form-data parser
 * (server/multipart.c, compiled in here: it is a pure function and needs
 * nothing of the server). The form an OpenAI client sends, quoting,
 * preambles, repeated fields, and every malformed case it must refuse with
 * a message rather than misread. */
#include "../server/multipart.c" /* defines _GNU_SOURCE first: memmem */

#include "check.h"

#include <stdlib.h>

static const char k_form[] =
    "preamble\r\n"
    "--XyZ\r\n"
    "Content-Disposition: form-data; name=\"file\"; filename=\"a \\\"b\\\".wav\"\r\n"
    "Content-Type: audio/wav\r\n"
    "\r\n"
    "RIFF\r\n--XyZnot-a-boundary\r\n\0bin\r\n"
    "--XyZ\r\n"
    "content-disposition: FORM-DATA; name=model\r\n"
    "\r\n"
    "whisper-1\r\n"
    "--XyZ\r\n"
    "Content-Disposition: form-data; name=\"timestamp_granularities[]\"\r\n\r\nword\r\n"
    "--XyZ\r\n"
    "Content-Disposition: form-data; name=\"timestamp_granularities[]\"\r\n\r\nsegment\r\n"
    "--XyZ\r\n"
    "Content-Disposition: form-data; name=\"prompt\"\r\n\r\n\r\n"
    "--XyZ--\r\nepilogue";

/* Parses a malloc'd exact-size copy (ASan sees any overread); returns rc. */
static int parse(const char *body, size_t len, const char *boundary, srv_form *f, char *why) {
    unsigned char *copy = malloc(len ? len : 1);
    memcpy(copy, body, len);
    int rc = srv_multipart_parse(copy, len, boundary, f, why, 256);
    if (rc == 0)
        for (int i = 0; i < f->n; i++) /* rebase the parts onto the caller's body */
            f->parts[i].data = (const unsigned char *)body + (f->parts[i].data - copy);
    free(copy);
    return rc;
}

static void test_boundary(void) {
    char b[SRV_FORM_BOUNDARY_MAX + 1], why[256];
    CHECK(srv_multipart_boundary("multipart/form-data; boundary=XyZ", b, why, sizeof why) == 0);
    CHECK_STR(b, "XyZ");
    CHECK(srv_multipart_boundary("Multipart/Form-Data;charset=utf-8; BOUNDARY=\"a b;c\"", b, why,
                                 sizeof why) == 0);
    CHECK_STR(b, "a b;c");
    CHECK(srv_multipart_boundary("application/json", b, why, sizeof why) == -1);
    CHECK(strstr(why, "multipart/form-data") != NULL);
    CHECK(srv_multipart_boundary("multipart/form-data", b, why, sizeof why) == -1);
    CHECK(strstr(why, "no boundary") != NULL);
    CHECK(srv_multipart_boundary("multipart/form-data; boundary=\"\"", b, why, sizeof why) == -1);
    CHECK(srv_multipart_boundary("multipart/form-data; boundary=\"open", b, why, sizeof why) == -1);
    char longb[200] = "multipart/form-data; boundary=";
    memset(longb + strlen(longb), 'x', 71);
    CHECK(srv_multipart_boundary(longb, b, why, sizeof why) == -1);
    CHECK(strstr(why, "1 to 70") != NULL);
}

static void test_openai_form(void) {
    srv_form f;
    char why[256] = "";
    int rc = parse(k_form, sizeof k_form - 1, "XyZ", &f, why);
    CHECK_MSG(rc == 0, "%s", why);
    CHECK_EQ_INT(f.n, 5);
    const srv_form_part *file = srv_form_get(&f, "file", 0);
    CHECK(file && file->has_filename && !strcmp(file->filename, "a \"b\".wav"));
    static const char data[] = "RIFF\r\n--XyZnot-a-boundary\r\n\0bin";
    CHECK(file && file->len == sizeof data - 1 && !memcmp(file->data, data, sizeof data - 1));
    const srv_form_part *model = srv_form_get(&f, "model", 0);
    CHECK(model && !model->has_filename && model->len == 9 && !memcmp(model->data, "whisper-1", 9));
    const srv_form_part *g0 = srv_form_get(&f, "timestamp_granularities[]", 0);
    const srv_form_part *g1 = srv_form_get(&f, "timestamp_granularities[]", 1);
    CHECK(g0 && g1 && g0->len == 4 && g1->len == 7 && !memcmp(g1->data, "segment", 7));
    CHECK(srv_form_get(&f, "timestamp_granularities[]", 2) == NULL);
    const srv_form_part *prompt = srv_form_get(&f, "prompt", 0);
    CHECK(prompt && prompt->len == 0);
    CHECK(srv_form_get(&f, "language", 0) == NULL);
}

static void expect_fail(const char *label, const char *body, const char *msg) {
    srv_form f;
    char why[256] = "";
    int rc = parse(body, strlen(body), "XyZ", &f, why);
    CHECK_MSG(rc == -1 && strstr(why, msg) != NULL, "%s: rc %d, \"%s\"", label, rc, why);
}

static void test_malformed(void) {
    /* every prefix of the form short of its closing boundary is refused */
    size_t full = sizeof k_form - 1;
    const char *close = memmem(k_form, full, "--XyZ--", 7); /* (the data holds a NUL) */
    size_t end = close ? (size_t)(close - k_form) + 7 : 0;
    CHECK(end > 0);
    for (size_t k = 0; k < end; k++) {
        srv_form f;
        char why[256] = "";
        CHECK_MSG(parse(k_form, k, "XyZ", &f, why) == -1 && why[0], "prefix %zu of %zu", k, full);
    }
    expect_fail("no boundary", "hello", "no multipart boundary");
    expect_fail("LF only", "--XyZ\nContent-Disposition: form-data; name=a\n\nx\n--XyZ--", "malformed");
    expect_fail("no disposition", "--XyZ\r\nContent-Type: x\r\n\r\n1\r\n--XyZ--", "no Content-Disposition");
    expect_fail("two dispositions",
                "--XyZ\r\nContent-Disposition: form-data; name=a\r\nContent-Disposition: form-data; "
                "name=b\r\n\r\n1\r\n--XyZ--", "two Content-Disposition");
    expect_fail("attachment", "--XyZ\r\nContent-Disposition: attachment; name=a\r\n\r\n1\r\n--XyZ--",
                "not form-data");
    expect_fail("no name", "--XyZ\r\nContent-Disposition: form-data; filename=a\r\n\r\n1\r\n--XyZ--",
                "no name");
    expect_fail("open quote", "--XyZ\r\nContent-Disposition: form-data; name=\"a\r\n\r\n1\r\n--XyZ--",
                "malformed Content-Disposition");
    char big[2048];
    snprintf(big, sizeof big, "--XyZ\r\nContent-Disposition: form-data; name=\"%0200d\"\r\n\r\n1\r\n--XyZ--", 0);
    expect_fail("long name", big, "longer than 127");
    memset(big, 'h', sizeof big);
    memcpy(big, "--XyZ\r\nX-Long: ", 15);
    big[sizeof big - 1] = 0;
    expect_fail("long header line", big, "too long");
    char many[4096] = "";
    size_t n = 0;
    for (int i = 0; i < SRV_FORM_MAX_PARTS + 1; i++)
        n += (size_t)snprintf(many + n, sizeof many - n,
                              "--XyZ\r\nContent-Disposition: form-data; name=p%d\r\n\r\nv\r\n", i);
    snprintf(many + n, sizeof many - n, "--XyZ--");
    expect_fail("too many parts", many, "more than 32 parts");
    srv_form f;
    char why[256];
    CHECK(srv_multipart_parse((const unsigned char *)"", 0, "", &f, why, sizeof why) == -1);
}

int main(void) {
    test_boundary();
    test_openai_form();
    test_malformed();
    return check_report();
}
