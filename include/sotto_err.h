/* sotto_err.h - status codes and an error record that carries a message.
 *
 * Every fallible function in sotto returns 0 (SOTTO_OK) or a negative
 * sotto_status. Functions that can say more about a failure take a
 * `sotto_err *err` out-parameter (may be NULL) and fill it with the code and
 * a human-readable message naming the file/tensor/field at fault.
 * Constructors return NULL on failure and fill `err`.
 */
#ifndef SOTTO_ERR_H
#define SOTTO_ERR_H

#include <stddef.h>

typedef enum sotto_status {
    SOTTO_OK = 0,
    SOTTO_E_NOMEM = -1,       /* allocation failed */
    SOTTO_E_IO = -2,          /* open/read/write/mmap failed */
    SOTTO_E_FORMAT = -3,      /* malformed or truncated file / data */
    SOTTO_E_INVALID = -4,     /* bad argument or option */
    SOTTO_E_UNSUPPORTED = -5, /* valid but not supported (yet) */
    SOTTO_E_NOTFOUND = -6,    /* missing file, tensor or token */
    SOTTO_E_RANGE = -7,       /* value out of range / capacity exceeded */
    SOTTO_E_INTERNAL = -8     /* a bug: an invariant did not hold */
} sotto_status;

#define SOTTO_ERR_MSG_MAX 512

typedef struct sotto_err {
    int code;                     /* a sotto_status */
    char msg[SOTTO_ERR_MSG_MAX];  /* NUL-terminated, empty when code == 0 */
} sotto_err;

/* Short constant name of a status code ("out of memory", ...). */
const char *sotto_strerror(int code);

/* Fill `err` (if non-NULL) with `code` and a printf-style message; returns
 * `code` so that callers can write `return sotto_err_set(err, ...)`. */
int sotto_err_set(sotto_err *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Reset to "no error". */
void sotto_err_clear(sotto_err *err);

#endif
