/* fuzz_multipart.c - the upload endpoints' multipart/form-data parser
 * (server/multipart.c). Input: a Content-Type value, a NUL byte, the body.
 * Every part returned must lie inside the body, in order, without overlap. */
#include "multipart.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const uint8_t *nul = memchr(data, 0, size < 512 ? size : 512);
    if (!nul) return 0;
    char ct[512], boundary[SRV_FORM_BOUNDARY_MAX + 1], why[256];
    memcpy(ct, data, (size_t)(nul - data) + 1);
    if (srv_multipart_boundary(ct, boundary, why, sizeof why)) {
        if (!why[0]) abort();
        return 0;
    }
    size_t bl = strlen(boundary);
    if (bl == 0 || bl > SRV_FORM_BOUNDARY_MAX) abort();
    const uint8_t *body = nul + 1;
    size_t len = size - (size_t)(body - data);
    /* an exact-size copy, so that ASan sees any read past the body */
    uint8_t *copy = malloc(len ? len : 1);
    if (!copy) abort();
    memcpy(copy, body, len);
    srv_form *f = malloc(sizeof *f);
    if (!f) abort();
    if (srv_multipart_parse(copy, len, boundary, f, why, sizeof why) == 0) {
        const uint8_t *prev = copy;
        for (int i = 0; i < f->n; i++) {
            const srv_form_part *p = &f->parts[i];
            if (p->data < prev || p->data + p->len > copy + len || !p->name[0] ||
                strlen(p->name) >= SRV_FORM_NAME_MAX || srv_form_get(f, p->name, 0) == NULL)
                abort();
            prev = p->data + p->len;
        }
    } else if (!why[0]) {
        abort();
    }
    free(f);
    free(copy);
    return 0;
}
